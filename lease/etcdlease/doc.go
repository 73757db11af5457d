// Package etcdlease is a leasestore.Store on etcd, for controllers whose leases
// must outlive one process: each lease is one etcd key, attached to an etcd
// lease that etcd itself expires, and its fencing token is the key's create
// revision.
//
// It answers the incident behind package lease — a lease renewal that timed
// out while the back end was in flux was reported as "not the leader" — at
// the store: only etcd's definitive answers become leasestore.ErrHeld (a
// *leasestore.HeldError naming the holder) or leasestore.ErrNotHeld (a
// *leasestore.NotHeldError naming the term that is over and, when the store read
// it, who holds the lease now); a timeout, "no leader", an unavailable
// member, a cancelled context or a broken connection is a *leasestore.CallError
// matching leasestore.ErrUnconfirmed, which wraps etcd's own error, so the
// Tracker reports ErrRenewalFailed with the time it still holds, never
// ErrNotLeader. A call never sent (its ctx ended while it waited for one of
// the store's call slots) matches leasestore.ErrNotSent only, and
// ErrOverCapacity when it waited.
//
// Both stores keep two promises under etcd faults — member crashes,
// partitions, a raft leader cut off from its peers that goes on answering,
// a deposed raft leader's queued revokes, an outage of the whole cluster:
// no two holders at once, and an outage is never "not the leader". A
// promise is extended only on a quorum's word; a term ends only when etcd
// shows it over (its key gone, created again or rewritten by another
// client), when it is revoked, or, for a SessionStore, when its holder
// stopped asking for it while etcd could be reached. The README lists the
// faults, and the assumptions the promises rest on (clock rates within the
// bound lease.Config.Margin sets, no suspend of the holder's host, no gRPC
// proxy, nobody else revoking the etcd leases or deleting the keys, the
// tracker and the store on one clock); DESIGN.md holds the argument.
//
// Words: a term is always a lease's term — one holder's tenure, a
// leasestore.Grant, whose token fences its writes. etcd's own term is always
// called a raft term (raftTerm in the code), and an etcd lease is etcd's
// TTL object, never the lease the trackers share.
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
// Store gives each term an etcd lease of its own, and every Extend is a
// keep-alive and a committed read: traffic grows with the number of
// leases. SessionStore puts every key of a process on one etcd lease, its
// session, kept alive by one stream, and answers Extend without a call to
// etcd: pick it for a controller that leads hundreds or thousands of
// applications.
//
//	store, err := etcdlease.NewSessionStore(cli, "/myapp/leases/", 3*2*30*time.Second)
//	...
//	defer store.Close()
//
// Both stores fence writes to etcd (Fence; lease.TokenGuard for other
// resources), tell a tracker early that a term is over (Lost, a
// leasestore.LossNotifier), wake waiting followers when the holder releases
// (WatchRelease, a leasestore.ReleaseWatcher), bound their calls in flight,
// renewals first (WithMaxInFlight; a Store also refuses new terms it could
// not renew in time: ErrOverCapacity), count their calls (StoreReport, a
// leasestore.Reporter) and log transitions only (WithLogger; the records
// are in the repository's docs/catalogue.md). Package etcdtest starts real
// etcd servers in a test binary, which is what this package's tests run on.
//
// This package is its own Go module, so that importing the rest of coldstart
// never pulls in etcd and gRPC. Inside the repository its go.mod builds
// against the root module through a development replace directive (=>
// ../..); a release tags the root module and requires that version instead.
package etcdlease
