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
//	store := leasestore.NewMemStore(leasestore.MemStoreConfig{}) // or an etcd-backed Store
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
// To act while leading, use Lead, the leadership loop: it runs fn each
// time the tracker comes to hold the lease, and fn's ctx ends — with a
// cause matching ErrNotLeader or ErrRenewalFailed — as soon as the lease
// can no longer be promised, never at an ambiguous failure while the
// promise stands (WithLeadership is its one-run form):
//
//	err := tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
//		return runSingularWorker(ctx, st.Token) // stop when ctx ends
//	})
//
// What a Held promise rests on: the store keeps its side of the Store
// contract, and this host's clock runs slower than every store leader's
// by less than Margin / (2×Duration) — 5 % with the default Margin
// (Duration/10); above that, a promise can outlast the store's term (see
// Config.Margin). A host suspended while holding (its monotonic clock
// stops) is detected on Linux with the wall clock, and the tracker answers
// Unknown until the store confirms again; elsewhere it is not detected
// (Config.Clock).
//
// What the settings promise, in numbers and in words: Config.Timing gives
// the store outage a holder rides Held before Unknown, the worst crash
// and graceful takeovers, the clock drift tolerated and the store calls
// per second; tests run each worst case. For Duration 2 s and the
// defaults: 1.9 s, 5 %, 554 renewal calls/s per 1,000 leases, and — with
// a Store that is a ReleaseWatcher (MemStore) — a crash takeover of 4.005
// s, a graceful one of 5 ms and 0.263 claim calls/s per waiting follower;
// with a Store that makes followers poll, 4.2 s, 200 ms and 5.26
// (ExampleConfig_Timing).
//
// A Tracker has gate.Component's shape without importing gate, so a
// readiness board follows it: board.Follow("lease", tr) opens once the
// tracker knows who leads (Held or NotHeld) and, while it does not, says
// why in Check's words ("unknown: claim not confirmed: lease call timeout
// 250ms"); it fails only when the tracker is closed.
//
// Any number of goroutines follow the status with Current (the latest
// status and a channel closed at its next change; none can block the
// renewer or each other). Report gives people, logs and metrics the state
// and counters; Alive is for /livez and fails only when the tracker itself
// is stuck (a store call that ignores its ctx), never because the store
// fails or someone else leads.
//
// Hand-over: with ReleaseOnClose, Close releases the lease only after the
// running Lead function has returned (waiting no longer than the promise),
// so a successor never starts while this process still does leader work;
// StepDown does the same without closing, and the tracker stays a follower
// (a Lead function that steps down passes its own ctx to StepDown).
//
// Fencing: pass Status.Token with every write to a guarded resource. A
// resource outside the lease's store keeps a TokenGuard, which refuses a
// token older than one it has admitted — a leader paused past its term
// cannot write after its successor did.
//
// A Store that is also a LossNotifier (MemStore, and the etcd store in
// lease/etcdlease) lets the tracker learn within moments that its term was
// revoked or taken over: it then asks the store at once, and only the
// store's answer decides.
//
// A Store that is also a ReleaseWatcher (MemStore) hands over in
// milliseconds: a follower refused a claim watches the holder's term and,
// when it is released, revoked or expires, claims after a random delay of
// at most 5 ms (so that a hundred followers do not claim at once; one
// wins, each other sends one refused claim). It then sends one claim a
// term (2×Duration) instead of one per ClaimInterval, in case the watch
// goes silent; a watch that fails makes it poll again. The watch is only
// a trigger: the store still refuses every claim while a term is live, so
// a successor waits out any promise that was not released.
//
// A process may lead thousands of leases, one Tracker each. A tracker is
// one goroutine and an alarm — about 6.7 KB (2.7 KB of heap, a 4 KB stack),
// 8.5 KB with MemStore's loss watch; BenchmarkManyTrackers measures it — and
// the store's load grows as leases / Duration. Trackers started together
// against a slow store do not pile up in step: each store call is cut off at
// Duration/4 (its error says so: "lease call timeout 500ms"), and a retry
// waits a doubling delay, Duration/80 to Duration/10, shortened at random
// by up to half (see Config).
//
// Renewals under load: Go's scheduler has no priorities, so when the
// process's own goroutines keep every P busy a renewer whose timer is due
// waits for one of them to be preempted (every 10 ms at most, per
// goroutine ahead of it). BenchmarkRenewLatency measures it on MemStore:
// on 2 cores, renew latency p99 was about 1.1–1.6 ms idle and 31–96 ms
// (24–87×) with a goroutine spinning on every P; with one P left free,
// 1.2–33 ms.
// The tracker cannot jump the queue; what keeps a leader's promise steady
// is (1) headroom: size CPU-bound worker pools to GOMAXPROCS−1, so one P is
// free for timers and I/O; (2) a Margin above the stalls the host sees,
// since a renewal timer that fires more than Margin late makes the
// tracker answer Unknown until the store confirms (Duration of 1 s or more,
// or Margin set, on hosts that saturate their CPUs); (3) a store client of
// its own, so that renewals do not queue behind the process's other calls
// (k8slease: its own rest.Config and rate limiter; a shared one crash-looped
// leaders in kubernetes-sigs/kueue#15538).
//
// Logs: with Config.Logger (a *slog.Logger; nil means none) the tracker
// writes one record per change of its state, never one per routine renewal,
// per retry that changes nothing, or on Check's path. The records, their
// levels and keys are in the repository's catalogue (docs/catalogue.md).
//
// Lease calls are counted once, in one shape: a StoreReport gives, per
// operation (claim, extend, revoke), the calls by the class of their
// answer (OK, Definitive, NotSent, Ambiguous) and the calls in flight — a
// store's StoreReport the calls it served, a Tracker's Report.Calls the
// calls it made. MemStore and leasetest.FaultStore are StoreReporters, so
// one metrics collector serves any of them; another Store counts the same
// way with StoreCounters, and names an ambiguous answer with a *CallError
// (ErrUnconfirmed).
//
// Package leasetest tests a Store against the contract (RunStoreContract),
// drives a Tracker on a testclock with no sleeps (Settle, Step) and injects
// store faults (FaultStore) into code built on a Tracker.
package lease
