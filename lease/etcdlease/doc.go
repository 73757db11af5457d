// Package etcdlease is a lease.Store on etcd, for controllers whose leases
// must outlive one process: each lease is one etcd key, attached to an etcd
// lease that etcd itself expires, and its fencing token is the key's create
// revision.
//
// It answers the incident behind package lease — a lease renewal that timed
// out while the back end was in flux was reported as "not the leader" — at
// the store: only etcd's definitive answers become lease.ErrHeld (a
// *lease.HeldError naming the holder) or lease.ErrNotHeld (a
// *lease.NotHeldError naming the term that is over and, when the store read
// it, who holds the lease now); a timeout, "no leader", an unavailable
// member, a cancelled context or a broken connection is a *lease.CallError
// matching lease.ErrUnconfirmed, which wraps etcd's own error, so the Tracker
// reports ErrRenewalFailed with the time it still holds, never
// ErrNotLeader. A call never sent (its ctx ended while it waited for one of
// the store's call slots) matches lease.ErrNotSent only, and ErrOverCapacity
// when it waited.
//
// Both stores keep two promises under etcd faults — member crashes,
// partitions, a raft leader cut off from its peers that goes on answering,
// an outage of the whole cluster:
//
//   - No two holders at once. A promise is extended only on a quorum's
//     word: a keep-alive answer counts once a read sent after it, in a
//     transaction raft commits (it writes nothing), is answered in the same
//     raft term (a stale leader can answer a keep-alive from its own
//     lessor, but cannot commit; a plain read's term may be stale on a
//     member that just installed a snapshot).
//   - An outage is never "not the leader". A term ends only when etcd says
//     so — a linearizable read (or the watch) finds its key no longer
//     recording the term: gone, created again, or rewritten by another
//     client (its value naming another holder, or on an etcd lease the
//     store did not put it on, or on none), or a
//     SessionStore's session lease is not found, confirmed in the same raft
//     term (a stale leader says "no such lease" of a lease granted after it
//     was cut off, so that answer alone is not definitive) — or, for a
//     SessionStore, when its holder stopped asking for it while the store
//     could reach etcd; while etcd cannot be reached every Extend is
//     ambiguous, and when etcd answers again the term goes on with the same
//     token if the key is still its own.
//
// A renewal that etcd confirmed is not always safe to build on: a raft
// leader deposed with revokes of expired leases still queued forwards them
// to the next leader, which commits them, whatever happened to the lease
// meanwhile. So an etcd lease is resumed only by a keep-alive confirmed in
// the raft term it was last confirmed in, within its TTL of that; after a
// leader change or a longer outage the key first moves to a fresh etcd
// lease (a SessionStore: a new session), guarded by its token, and only
// then is anything promised.
//
// The promises rest on assumptions, listed in the README with what happens
// outside each: clock rates that differ by less than the bound
// lease.Config.Margin sets (the figure is in package lease's doc); no
// suspend of the holder's host; no gRPC proxy between client and etcd; nobody else revoking the etcd leases
// or deleting the keys; the tracker and the store on one clock.
//
// The mapping onto etcd: Claim grants an etcd lease of the requested
// duration rounded up to whole seconds and, in one transaction, puts the
// key (value: the holder) only if it does not exist, else reads the holder.
// Extend keeps the etcd lease alive once and then reads the key to confirm
// it still records the term — the token, the holder, the etcd lease — in
// the keep-alive's raft term; etcd renews
// for the TTL it granted, and the Grant reports that TTL. Revoke deletes the key in a transaction guarded by
// the token, then revokes the etcd lease. Lost watches a term and tells
// early when it is over; it makes the Store a lease.LossNotifier, so a
// lease.Tracker renews at once (and reports ErrNotLeader promptly) when
// another party deletes, rewrites or takes over its key.
//
// Both stores are lease.ReleaseWatchers: a refused claim's HeldError names
// the term (Token, the key's create revision), and WatchRelease watches the
// key from the refusal's revision, so a waiting Tracker claims within
// milliseconds of the holder's release instead of polling; the claim is
// still the guarded put-if-absent, so a watch only ever wakes it early.
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"}})
//	...
//	defer cli.Close()
//	store, err := etcdlease.NewStore(cli, "/myapp/leases/")
//	...
//	tr, err := lease.NewTracker(lease.Config{
//		Store: store,
//		Name:  "singular", Holder: "unit-0", Duration: 30 * time.Second,
//	})
//
// Two stores, one mapping of keys: Store gives each term an etcd lease of
// its own (every Extend is a keep-alive and a read: traffic grows with the
// number of leases), SessionStore puts every key of a process on one etcd
// lease, its session, kept alive by one stream, and answers Extend without
// a call to etcd (traffic flat in the number of leases: one keep-alive
// and its confirming committed read every TTL/3; a crashed process's leases are free
// after the session's TTL). Pick SessionStore
// for a controller that leads hundreds or thousands of applications:
//
//	store, err := etcdlease.NewSessionStore(cli, "/myapp/leases/", 3*2*30*time.Second)
//	...
//	defer store.Close()
//
// Both bound the calls they have in flight (DefaultMaxInFlight, newest
// first), so that thousands of trackers starting together do not time out
// their own claims; SessionStore also batches claims, 64 to a
// transaction. A call whose ctx ends before it is sent returns an error
// matching lease.ErrNotSent (and ErrOverCapacity if it waited for a slot).
// A Store serves renewals before claims, the oldest term first, and
// refuses new terms (ErrOverCapacity, not sent) once the terms it holds
// would keep all its slots busy with renewals or a keep-alive waited a
// twentieth of its TTL for a slot: overload reads as overload, before any
// term runs out, never as "not the leader".
//
// Fencing: a leader paused past its term (a GC stall, a frozen VM) may
// wake up believing it still leads. A write to etcd guarded by Fence —
// a compare for the caller's own transaction that holds only while the
// term with that token still holds its key, as etcd's Mutex.IsOwner — is
// refused once another term has taken the lease:
//
//	st, err := tr.Check(ctx, 0) // or the Status Lead passes to its fn
//	...
//	resp, err := cli.Txn(ctx).
//		If(store.Fence("singular", st.Token)).
//		Then(clientv3.OpPut("/myapp/config", cfg)).
//		Commit()
//	if err == nil && !resp.Succeeded {
//		// our term is over: nothing was written
//	}
//
// For resources outside etcd, lease.TokenGuard checks the token where the
// write lands.
//
// Both stores are lease.StoreReporters: StoreReport counts their calls of
// Claim, Extend and Revoke by the class of the answer (ok, definitive, not
// sent — ErrOverCapacity among them — and ambiguous) and the calls in
// flight, as every store does. WithLogger logs transitions only: a
// SessionStore's session granted, unconfirmed (an outage begins),
// confirmed again (with how long it was not), retired, lost and
// re-created — never a line per call, never a count, nothing after Close
// has returned. The repository's catalogue (docs/catalogue.md) lists the
// records and their keys.
//
// Tests: package etcdtest (lease/etcdlease/etcdtest) starts real etcd
// servers in the test binary — one member, or a cluster whose leader a
// test can find, stop and restart — which is what this package's own
// tests run on.
//
// This package is its own Go module, so that importing the rest of coldstart
// never pulls in etcd and gRPC. Its go.mod requires
// github.com/coldstart-go/coldstart at v0.0.0 with a development replace
// directive (=> ../..) that builds it against the root module in the same
// repository; a release tags the root module and requires that version
// instead.
package etcdlease
