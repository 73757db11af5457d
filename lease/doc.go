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
// the promise stands. Check answers the question once.
//
// The store is any leasestore.Store: leasestore.MemStore in one process,
// lease/etcdlease on etcd, lease/k8slease on Kubernetes Leases. A store
// that is a leasestore.LossNotifier lets the tracker learn at once that
// its term was taken; one that is a leasestore.ReleaseWatcher hands over in
// milliseconds. Package leasestore is for those who write a store.
//
// A Held promise is a deadline on the monotonic clock, and rests on the
// store keeping the Store contract and on this host's clock running slower
// than every store leader's by less than Margin / (2×Duration). A late
// renewal timer demotes nothing (it is counted and explained in Report);
// the evidence that the monotonic clock stopped — a suspend (on Linux), a
// VM paused and its wall clock corrected since — makes it Unknown.
// Config.Timing states what the settings promise in numbers; DESIGN.md
// says why.
//
// Hand-over (ReleaseOnClose, StepDown) waits for the running Lead function;
// fencing passes Status.Token to every guarded write (TokenGuard). A Tracker
// is a readiness component of gate.Component's shape; Current, Report and
// Alive serve followers, metrics and /livez.
package lease
