// Package lease claims and renews a named lease and answers "am I the
// leader, and for how long?" with three values — Held, NotHeld, Unknown —
// never collapsing an unconfirmed renewal into "not leader" (README.md
// beside this file tells the incident it answers). An ambiguous store
// answer is ErrRenewalFailed with the validity still left, never
// ErrNotLeader; every deadline counts from the local clock read before the
// store call; and each term carries a fencing token.
//
//	tr, err := lease.NewTracker(lease.Config{
//		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second,
//	})
//	...
//	defer tr.Close()
//	err = tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
//		return runSingularWorker(ctx, st.Token) // stop when ctx ends
//	})
//
// Lead runs fn each time the tracker comes to hold the lease; fn's ctx
// ends, with a cause matching ErrNotLeader or ErrRenewalFailed, as soon as
// the lease can no longer be promised, never at an ambiguous failure while
// the promise stands. Check answers the question once:
//
//	st, err := tr.Check(ctx, 30*time.Second)
//	switch {
//	case err == nil: // leader until st.Until at least; fence with st.Token
//	case errors.Is(err, lease.ErrNotLeader): // someone else leads
//	case errors.Is(err, lease.ErrRenewalFailed): // unconfirmed; still leader until st.Until if st.State == lease.Held
//	}
//
// The store is any leasestore.Store: leasestore.MemStore in one process,
// lease/etcdlease on etcd, lease/k8slease on Kubernetes Leases. A store
// that is a leasestore.LossNotifier lets the tracker learn at once that
// its term was taken; one that is a leasestore.ReleaseWatcher hands over in
// milliseconds. Package leasestore is for those who write a store.
//
// A Held promise rests on the store keeping the Store contract and on this
// host's clock running slower than every store leader's by less than
// Margin / (2×Duration); a suspend is detected on Linux. Config.Timing
// states what the settings promise in numbers; DESIGN.md says why.
//
// Hand-over: with ReleaseOnClose, Close releases the lease only after the
// running Lead function has returned, so a successor never starts while
// this process still does leader work; StepDown does the same without
// closing. Fencing: pass Status.Token with every write to a guarded
// resource; a resource outside the store keeps a TokenGuard.
//
// A Tracker has gate.Component's shape without importing gate, so a
// readiness board follows it (board.Follow("lease", tr)); Current follows
// the status, Report gives its state and counts to people and metrics, and
// Alive is for /livez. With Config.Logger it writes one record per change
// of state (see docs/catalogue.md).
package lease
