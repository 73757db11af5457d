package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// State is what a Tracker knows about its lease.
type State int

const (
	// Unknown: the store has not confirmed the lease for now — no claim
	// answered yet, a renewal failed ambiguously and the validity it had
	// ran out, or the host's clocks show that the monotonic clock may
	// have stopped since (a suspend, a paused VM). Do not act as leader;
	// this is not "not leader" either.
	Unknown State = iota
	// Held: this tracker holds the lease until Status.Until. Act as
	// leader until then, and pass Status.Token to what you guard.
	Held
	// NotHeld: the store said definitively that another holder has the
	// lease (or that our term is over), or this tracker stepped down. Do
	// not act as leader; the tracker keeps claiming, and Current reports
	// when it leads again.
	NotHeld
)

// String returns "unknown", "held" or "not-held".
func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Held:
		return "held"
	case NotHeld:
		return "not-held"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is a tracker's answer about its lease: act on State, and only as
// leader while it says Held and Until lies ahead.
type Status struct {
	State State
	// Holder is ours when Held, the other holder (when the store named
	// it) when NotHeld, and empty when Unknown.
	Holder string
	// Until is the end of the validity last confirmed by the store, on the
	// tracker's clock, computed as (time before the store call) + (granted
	// duration) − Margin. It is a promise only when State is Held.
	Until time.Time
	// Token is the fencing token of the term last confirmed, the one Until
	// belongs to: 0 when NotHeld, and when Unknown with no term confirmed
	// since (Report.Token keeps it).
	Token uint64
}

// Tracker claims a named lease, keeps it renewed in the background, and
// answers "do I hold it, and for how long?" with Held, NotHeld or Unknown,
// never turning an unconfirmed renewal into "not leader". It claims for
// 2×Duration and extends once RenewFraction of the validity has passed. A
// Tracker is safe for concurrent use; Close stops it. It has the shape of
// gate.Component (Completed, Failed, Cause, Detail).
//
// A Store that is also a LossNotifier or a ReleaseWatcher is used as those
// interfaces say: a loss signal makes the tracker renew at once (only the
// store's answer changes the status), a release signal makes a follower
// claim at once instead of every ClaimInterval.
type Tracker struct {
	// Set by NewTracker and never written again.
	cfg        Config
	maxPromise time.Duration // the most any check can ask: 2×Duration − Margin
	clocks     clockMeter    // nil where a stopped clock is not seen
	load       loadMeter     // what explains a late renewal

	// snap is the latest immutable snapshot; only the renewer publishes
	// one (publish).
	snap atomic.Pointer[snapshot]

	// The parts, each owning its state (its type says what guards it).
	sched    schedule  // what checks and StepDown ask of the renewer: a mutex
	leaders  leaders   // the Lead functions running: a mutex
	life     lifecycle // from NewTracker to Close: channels closed once
	renewer  renewer   // the renewer goroutine's own: no lock
	counters counters  // the Report's counts: atomics the renewer adds to
}

// lifecycle is the tracker's life from NewTracker to Close, told by
// channels each closed once.
type lifecycle struct {
	ctx       context.Context // cancelled (cause ErrClosed) by Close: ends an in-flight call
	cancel    context.CancelCauseFunc
	closeOnce sync.Once
	done      chan struct{} // closed by Close
	known     chan struct{} // closed at the first Held or NotHeld (Completed)
	isKnown   bool          // known is closed; read and written by the renewer only
	exited    chan struct{} // closed when the renewer has returned
	closeErr  error         // the release error; written before exited closes
}

// snapshot is one published state. It is never modified once stored.
// changed is closed when a snapshot with a different status (or closed)
// replaces it; a new snapshot with the same status shares its channel.
type snapshot struct {
	status Status
	// cause is, for Held, the ambiguous error of the latest failed renewal
	// (nil when the latest call succeeded); for Unknown, why; for NotHeld,
	// the *NotLeaderError.
	cause   error
	closed  bool
	changed chan struct{}
	// since is when the tracker entered status.State (on its clock).
	since time.Time
	// clocks is, for Held, what the host's clocks said when the call
	// that confirmed Until was sent (suspend.go).
	clocks clockReading
	// lastToken is the token of the term last confirmed: status.Token
	// while there is one, and kept after that term ends (Report.Token).
	lastToken uint64
}

// round is one store call that checks can wait for.
type round struct {
	done chan struct{}
	// clocks is what the host's clocks said as the call was sent, read
	// under schedule.mu as it began: a check whose reading shows them
	// stopped since is not answered by it (await).
	clocks clockReading
}

func newRound() *round { return &round{done: make(chan struct{})} }

// stepDownRequest is a StepDown waiting for the renewer.
type stepDownRequest struct {
	published chan struct{} // closed once NotHeld is published
	done      chan struct{}
	err       error     // the release's error; written before done closes
	held      *snapshot // the snapshot stepped down from (for owed)
}

// NewTracker validates cfg, which must have a Store, and starts claiming
// the lease in the background: the first claim goes at once. Call Close to
// stop.
func NewTracker(cfg Config) (*Tracker, error) {
	if cfg.Store == nil {
		return nil, jujuerrors.NotValidf("nil Store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, jujuerrors.Trace(err)
	}
	cfg = cfg.withDefaults()
	clocks, load := cfg.clocks, cfg.load
	if clocks == nil {
		clocks = hostClocks
	}
	if load == nil {
		load = hostLoad{}
	}
	notifier, _ := cfg.Store.(leasestore.LossNotifier)
	watcher, _ := cfg.Store.(leasestore.ReleaseWatcher)
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &Tracker{
		cfg:        cfg,
		maxPromise: 2*cfg.Duration - cfg.Margin,
		clocks:     clocks,
		load:       load,
		sched:      schedule{kick: make(chan struct{}, 1), stepDown: make(chan *stepDownRequest), spare: newRound()},
		life: lifecycle{ctx: ctx, cancel: cancel,
			done: make(chan struct{}), known: make(chan struct{}), exited: make(chan struct{})},
		renewer: renewer{retry: backoff.Backoff{Policy: cfg.retryPolicy()},
			loss: lossWatch{notifier: notifier}, waiting: releaseWatch{watcher: watcher}},
		counters: counters{base: cfg.Clock.Now().Add(-1)},
	}
	t.snap.Store(&snapshot{cause: errNotClaimed, changed: make(chan struct{}), since: cfg.Clock.Now()})
	go t.run()
	return t, nil
}

// Check reports whether this tracker holds the lease for at least atLeast
// from now.
//
// While the cached validity covers atLeast it answers (Held, nil) at once,
// with no store call — even if a background renewal has just failed
// ambiguously, because the promise still holds. Otherwise it starts a
// renewal at once (or joins the one in flight) and waits for it, bounded by
// ctx:
//   - confirmed for atLeast: (Held, nil);
//   - the store says another holder has it or our term is over, or the
//     tracker stepped down: (NotHeld, *NotLeaderError matching
//     ErrNotLeader). While NotHeld, Check answers from cache (the tracker
//     keeps claiming in the background);
//   - the store could not confirm: a *RenewalFailedError matching
//     ErrRenewalFailed, with State Held and the old Until while that
//     validity lasts, Unknown after it;
//   - ctx ended first: the cached status and an error wrapping ctx.Err().
//
// Once the host's clocks show that the monotonic clock may have stopped
// since the last confirmation — a suspend of the host, or a VM paused and
// its wall clock corrected since (see Config.Clock) — a Held status
// answers Unknown, with the cause, until the store confirms again. A late
// renewal timer is no such evidence: it renews at once, and is counted
// (Report.LateRenewals).
//
// atLeast must be in [0, 2×Duration − Margin], the longest promise a claim
// can give; anything else is an invalid argument (errors.NotValid). After
// Close, Check returns NotHeld and an error matching ErrClosed.
func (t *Tracker) Check(ctx context.Context, atLeast time.Duration) (Status, error) {
	if s := t.snap.Load(); s.status.State == Held && atLeast >= 0 && atLeast <= t.maxPromise {
		now := t.cfg.Clock.Now()
		if left := s.status.Until.Sub(now); left >= atLeast && left > 0 && t.stopped(s, now) == nil {
			return s.status, nil
		}
	}
	return t.check(ctx, atLeast)
}

func (t *Tracker) check(ctx context.Context, atLeast time.Duration) (Status, error) {
	if atLeast < 0 || atLeast > t.maxPromise {
		return Status{}, jujuerrors.NotValidf("lease %q: check for at least %v (must be in [0, %v])",
			t.cfg.Name, atLeast, t.maxPromise)
	}
	s := t.snap.Load()
	now := t.cfg.Clock.Now()
	seen := t.readClocks(now)
	if s.closed || s.status.State == NotHeld ||
		s.status.State == Held && now.Before(s.status.Until) && s.status.Until.Sub(now) >= atLeast &&
			clockStopped(s.clocks, seen) == nil {
		return t.evaluate(s, now, atLeast)
	}
	r := t.sched.await(&t.snap, s, seen)
	select {
	case <-r.done:
	case <-t.life.exited:
	case <-ctx.Done():
		// The answer so far stays in the error, beside the ctx's end.
		st, err := t.evaluate(t.snap.Load(), t.cfg.Clock.Now(), atLeast)
		if err == nil {
			return st, fmt.Errorf("lease %q: waiting for the store: %w", t.cfg.Name, ctx.Err())
		}
		return st, fmt.Errorf("waiting for the store: %w; so far: %w", ctx.Err(), err)
	}
	return t.evaluate(t.snap.Load(), t.cfg.Clock.Now(), atLeast)
}

// evaluate turns snapshot s into a check's answer at now.
func (t *Tracker) evaluate(s *snapshot, now time.Time, atLeast time.Duration) (Status, error) {
	st := s.status
	stopped := t.stopped(s, now)
	switch {
	case s.closed:
		return st, fmt.Errorf("lease %q: %w", t.cfg.Name, ErrClosed)
	case st.State == NotHeld:
		return st, s.cause
	case stopped != nil:
		st.State, st.Holder = Unknown, ""
		return st, &RenewalFailedError{Name: t.cfg.Name, Err: stopped, Until: st.Until}
	case st.State == Held && now.Before(st.Until) && st.Until.Sub(now) >= atLeast:
		return st, nil
	case st.State == Held && now.Before(st.Until):
		cause := s.cause
		if cause == nil {
			cause = errShortTerm
		}
		return st, &RenewalFailedError{Name: t.cfg.Name, Err: cause, Until: st.Until}
	}
	// Unknown, or Held whose validity has run out unconfirmed.
	cause := s.cause
	if cause == nil {
		cause = errRanOut
	}
	st.State, st.Holder = Unknown, ""
	return st, &RenewalFailedError{Name: t.cfg.Name, Err: cause, Until: st.Until}
}

// Close stops renewing and waits for the renewer to return; the functions
// Lead and WithLeadership run see their ctx end with a cause matching
// ErrClosed. With ReleaseOnClose it then revokes the held term once every
// running Lead function has returned (waiting no longer than the promise,
// Until), bounded by Duration/4, and returns the store's error if the
// revoke could not be confirmed. A StepDown still waiting for Lead
// functions makes its release the same way (and returns its error).
// Close is idempotent and safe to call concurrently; every call returns
// the same result. Do not call Close from a Lead function with
// ReleaseOnClose, or while a StepDown waits for it: it would wait for
// itself until the promise runs out.
func (t *Tracker) Close() error {
	t.life.closeOnce.Do(func() {
		close(t.life.done)
		t.life.cancel(ErrClosed)
	})
	<-t.life.exited
	return t.life.closeErr
}

// publish makes s, a new snapshot, the one Check, Current, Lead and Report
// see; only the renewer calls it. It fills in s.since and s.changed (shared
// with the old snapshot while the status is the same), counts and logs a
// change of state, then wakes the followers. latency is for the log, or
// noCall. DESIGN.md, "The renewer and checks", gives the order's reasons.
func (t *Tracker) publish(s *snapshot, latency time.Duration) {
	old := t.snap.Load()
	now := t.cfg.Clock.Now()
	s.since = old.since
	s.lastToken = s.status.Token
	if s.lastToken == 0 {
		s.lastToken = old.lastToken // a NotHeld (or Unknown since) has no term
	}
	if s.status.State != old.status.State {
		s.since = now
		t.counters.transitions.Add(1)
		if old.status.State == Unknown && !old.closed {
			t.counters.unknownNanos.Add(int64(now.Sub(old.since)))
		}
	}
	t.logChange(old, s, latency)
	o, n := old.status, s.status
	same := old.closed == s.closed && o.State == n.State && o.Holder == n.Holder &&
		o.Token == n.Token && o.Until.Equal(n.Until)
	if same {
		s.changed = old.changed
		t.snap.Store(s)
		return
	}
	s.changed = make(chan struct{})
	t.snap.Store(s)
	t.life.markKnown(s) // before followers wake
	close(old.changed)
}

// schedule is where checks and StepDown meet the renewer. mu guards
// inflight, pending and next; kick and stepDown carry requests.
type schedule struct {
	mu       sync.Mutex
	inflight *round // the store call now running
	pending  *round // asked for by a check, not started yet
	// next is when the renewer calls the store next, if nothing asks it
	// sooner; zero while a call is asked for or running, or the renewer
	// is busy.
	next     time.Time
	kick     chan struct{}         // a check asked for a call (one queued is enough)
	stepDown chan *stepDownRequest // StepDown's requests, taken by the renewer
	// spare is the round the renewer's next call starts if no check asked
	// for one, made with the schedule and again once a call has ended, so
	// that a call is sent without allocating: on a busy process an allocation during a GC
	// cycle can hold a goroutine in the GC's assist for 100 ms and more.
	// The renewer's alone (begin, end): not guarded by mu.
	spare *round
}

// await returns the store call a check should wait for: the one in
// flight, or a new one it asks the renewer to start at once, unless the
// snapshot in snap, read under mu, answers already. The check found
// snapshot saw wanting, with the host's clocks reading seen: a call sent
// before they showed a stopped clock cannot confirm past it, so the check
// waits for the next.
func (sc *schedule) await(snap *atomic.Pointer[snapshot], saw *snapshot, seen clockReading) *round {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if r := sc.inflight; r != nil && clockStopped(r.clocks, seen) == nil {
		return r
	}
	s := snap.Load()
	if s.closed || s.status.State == NotHeld ||
		s != saw && !(s.status.State == Held && clockStopped(s.clocks, seen) != nil) {
		// Answered already: by a step-down or Close (DESIGN.md), or by
		// a call that ended since the check looked.
		r := newRound()
		close(r.done)
		return r
	}
	if sc.pending == nil {
		sc.pending = newRound()
		sc.next = time.Time{} // the renewer is about to call the store
		select {
		case sc.kick <- struct{}{}:
		default: // a kick is already queued
		}
	}
	return sc.pending
}

// hasPending reports whether a check waits for a call not started yet.
func (sc *schedule) hasPending() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.pending != nil
}

// setNext records when the renewer next calls the store (zero: now, or
// busy), unless a check has already asked for a call.
func (sc *schedule) setNext(at time.Time) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.pending == nil {
		sc.next = at
	}
}

// nextCall is when the renewer calls the store next, as setNext left it.
func (sc *schedule) nextCall() time.Time {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.next
}

// begin starts the round of the store call the renewer makes now, and
// returns it with the time it is sent and what the host's clocks say then
// (none without a meter), read under mu: a check that asked for the call
// before it began saw the clocks no later than it does.
func (sc *schedule) begin(clk clock.Clock, meter clockMeter) (*round, time.Time, clockReading) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	r := sc.pending
	if r == nil {
		r, sc.spare = sc.spare, nil
	}
	sc.pending, sc.inflight, sc.next = nil, r, time.Time{}
	sent := clk.Now()
	if meter != nil {
		r.clocks = meter.read(sent)
	}
	return r, sent, r.clocks
}

// end ends round r, once its answer is published, and makes the spare
// round of the next call.
func (sc *schedule) end(r *round) {
	sc.mu.Lock()
	sc.inflight = nil
	sc.mu.Unlock()
	close(r.done)
	if sc.spare == nil {
		sc.spare = newRound()
	}
}

// dropPending answers the round a check asked for and the renewer has not
// started, without making its call (a step-down has just published the
// answer), and drops the kick that asked for it.
func (sc *schedule) dropPending() {
	sc.mu.Lock()
	r := sc.pending
	sc.pending = nil
	sc.mu.Unlock()
	if r != nil {
		close(r.done)
	}
	select {
	case <-sc.kick:
	default:
	}
}
