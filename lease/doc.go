// Package lease claims and renews a named lease and answers "am I the
// leader, and for how long?" with three values — Held, NotHeld, Unknown —
// never collapsing an unconfirmed renewal into "not leader".
//
// It answers a real incident: a unit asked is-leader (yes), and a second
// later an action failed with "not the leader", because a renewal timed out
// while the lease back end was in flux and the unknown outcome was reported
// as a loss, although the unit provably still held ~30 s of its term. Here
// a Store's answers are three-valued (ErrHeld/ErrNotHeld are definitive,
// anything else is ambiguous), every deadline counts from the local clock
// read before the store call, and Check reports an ambiguous failure as
// ErrRenewalFailed with the validity still left, never as ErrNotLeader.
// Grants carry fencing tokens for the resources a leader guards.
//
//	store := lease.NewMemStore(nil) // or an etcd-backed Store
//	tr, err := lease.NewTracker(lease.Config{
//		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second,
//	})
//	...
//	defer tr.Close()
//	st, err := tr.Check(ctx, 30*time.Second)
//	switch {
//	case err == nil: // leader until st.Until at least; fence with st.Token
//	case errors.Is(err, lease.ErrNotLeader): // someone else leads
//	case errors.Is(err, lease.ErrRenewalFailed): // unconfirmed; still leader until st.Until if st.State == lease.Held
//	}
//
// To act only while leading, use WithLeadership: its ctx ends when the
// promise does. A Store that is also a LossNotifier (MemStore, and the etcd
// store in lease/etcdlease) lets the tracker learn within moments that its
// term was revoked or taken over: it then asks the store at once, and only
// the store's answer decides.
//
// A process may lead thousands of leases, one Tracker each. A tracker is
// one goroutine and a timer — about 6.5 KB (2.4 KB of heap, a 4 KB stack),
// 8 KB with MemStore's loss watch; BenchmarkManyTrackers measures it — and
// the store's load grows as leases / Duration. Trackers started together
// against a slow store do not pile up in step: each store call is cut off at
// CallTimeout, and a retry waits a doubling delay drawn from at least its
// upper half (see Config.Jitter and RetryDelay).
//
// Package leasetest tests a Store against the contract (RunStoreContract)
// and injects store faults (FaultStore) into code built on a Tracker.
package lease
