package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// State is what a Tracker knows about its lease.
type State int

const (
	// Unknown: the store has not confirmed the lease for now — no claim
	// answered yet, a renewal failed ambiguously and the validity it had
	// ran out, or a late timer suggests the process was paused. Do not
	// act as leader; this is not "not leader" either.
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
	// Token is the fencing token of the term last confirmed.
	Token uint64
}

// Tracker claims a named lease, keeps it renewed in the background, and
// answers "do I hold it, and for how long?" with Held, NotHeld or Unknown,
// never turning an unconfirmed renewal into "not leader".
//
// It claims for 2×Duration and extends once RenewFraction of the validity
// has passed. Check answers from a cached snapshot while enough validity
// remains; otherwise it waits for a renewal. Lead runs leader work while
// the lease is held, Current follows the status, Report and Alive tell
// people and health checks what the tracker does. A Tracker is safe for
// concurrent use; Close stops it. It is also a readiness component of
// gate.Component's shape (Completed, Failed, Cause, Detail), so
// board.Follow("lease", tr) opens once it knows who leads.
//
// If the Store is also a LossNotifier, the tracker watches each term it
// holds and, when told the term may be over, renews at once instead of at
// the next scheduled renewal, so a revoked or taken-over term is reported
// as ErrNotLeader promptly. The signal alone changes nothing: only the
// store's answer to that renewal does (a confirmation keeps Held and the
// token). Until that answer, Check still answers from the cached promise.
//
// If the Store is also a ReleaseWatcher, a follower refused a claim waits
// on the holder's term and claims when it is over (after at most 5ms, see
// Config.ClaimInterval), instead of every ClaimInterval; a claim once a
// term covers a watch gone silent, and a watch that fails makes it poll.
type Tracker struct {
	cfg        Config
	maxPromise time.Duration // the most any check can ask: 2×Duration − Margin
	sleep      sleepMeter    // nil where a suspend of the host is not detected

	// snap is the latest immutable snapshot; only the renewer stores it.
	// Check's fast path is one atomic load, one clock read, and the sleep
	// meter's look at that reading.
	snap atomic.Pointer[snapshot]

	// mu guards inflight, pending and next: the rounds checks wait on, and
	// the renewer's next scheduled call (zero while one is asked for).
	mu       sync.Mutex
	inflight *round // the store call now running
	pending  *round // asked for by a check, not started yet
	next     time.Time
	kick     chan struct{}
	stepDown chan *stepDownRequest

	// running counts Lead (and WithLeadership) functions that have not
	// returned; runDone is closed when it drops to zero. Guarded by runMu.
	runMu   sync.Mutex
	running int
	runDone chan struct{}

	ctx       context.Context // cancelled (cause ErrClosed) by Close: ends an in-flight call
	cancel    context.CancelCauseFunc
	done      chan struct{} // closed by Close
	known     chan struct{} // closed at the first Held or NotHeld (Completed)
	isKnown   bool          // known is closed; owned by the renewer
	closeOnce sync.Once
	exited    chan struct{} // closed when the renewer has returned
	closeErr  error         // the release error; written before exited closes

	counters counters
	// base is one nanosecond before NewTracker, on its clock: the counters
	// store times as offsets from it (positive, so zero can mean none),
	// which keeps the clock's monotonic reading.
	base time.Time

	// Owned by the renewer goroutine.
	grant    Grant
	hasGrant bool
	// owed is a StepDown whose release Close interrupted: shutdown makes
	// it once the Lead functions have returned, then answers it.
	owed    *stepDownRequest
	retry   backoff.Backoff // after ambiguous failures; reset by an answer
	loss    lossWatch
	waiting releaseWatch // another holder's term, while NotHeld
	// refusedAt is when the latest claim another holder's term refused
	// was answered, since this tracker last held the lease: the start of
	// the leaderless gap a hand-over to it ends, unless the watch said
	// that term was over later (releaseWatch.overAt). Zero when no claim
	// was refused since.
	refusedAt time.Time
}

// releaseWatch is the renewer's watch, through a ReleaseWatcher, of the
// term another holder has.
type releaseWatch struct {
	watcher ReleaseWatcher // nil when the Store is not one
	token   uint64         // the term watched, while armed
	holder  string         // the holder the refusal named, while armed
	armed   bool
	ch      <-chan error
	stop    context.CancelFunc
	// over is the last term whose watch said it was over, and overHolder
	// the holder the refusal named: a refusal naming both again shows the
	// watch wrong, and the tracker polls rather than trust it again. (A
	// refusal naming another holder with that term's token — a release
	// reserved for a preferred holder, as k8slease's — is watched anew.)
	over       uint64
	overHolder string
	// overAt is when the watch said so, on the tracker's clock.
	overAt time.Time
}

// lossWatch is the renewer's watch of its term through a LossNotifier.
type lossWatch struct {
	notifier LossNotifier // nil when the Store is not one
	token    uint64       // the term watched (or last watched)
	armed    bool         // a watch of token is running
	lost     <-chan struct{}
	stop     context.CancelFunc
	// signalled: the watch of token fired and the renewer has renewed at
	// once; if the store confirms the term, the signal was spurious.
	signalled bool
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
	// slept is, for Held, how long the host had been suspended in all
	// when the call that confirmed Until was sent (suspend.go).
	slept time.Duration
}

// round is one store call that checks can wait for.
type round struct{ done chan struct{} }

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
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &Tracker{
		cfg:        cfg,
		maxPromise: 2*cfg.Duration - cfg.Margin,
		kick:       make(chan struct{}, 1),
		stepDown:   make(chan *stepDownRequest),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		known:      make(chan struct{}),
		exited:     make(chan struct{}),
		retry:      backoff.Backoff{Policy: cfg.retryPolicy()},
		base:       cfg.Clock.Now().Add(-1),
	}
	t.loss.notifier, _ = cfg.Store.(LossNotifier)
	t.waiting.watcher, _ = cfg.Store.(ReleaseWatcher)
	t.sleep = cfg.sleep
	if t.sleep == nil {
		t.sleep = hostSleep
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
//     ErrNotLeader). While NotHeld, Check answers from cache; the tracker
//     keeps claiming in the background every ClaimInterval, or, with a
//     ReleaseWatcher, when the holder's term is over;
//   - the store could not confirm: a *RenewalFailedError matching
//     ErrRenewalFailed, with State Held and the old Until while that
//     validity lasts, Unknown after it;
//   - ctx ended first: the cached status and an error wrapping ctx.Err().
//
// After a suspend of the host (detected on Linux, see Config.Clock) a Held
// status answers Unknown, with the cause, until the store confirms again.
//
// atLeast must be in [0, 2×Duration − Margin], the longest promise a claim
// can give; anything else is an invalid argument (errors.NotValid). After
// Close, Check returns NotHeld and an error matching ErrClosed.
func (t *Tracker) Check(ctx context.Context, atLeast time.Duration) (Status, error) {
	if s := t.snap.Load(); s.status.State == Held && atLeast >= 0 && atLeast <= t.maxPromise {
		// Held means now < Until, and at least atLeast left, and no
		// suspend since the store confirmed it.
		now := t.cfg.Clock.Now()
		if left := s.status.Until.Sub(now); left >= atLeast && left > 0 && t.suspended(s, now) == 0 {
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
	if s.closed || s.status.State == NotHeld ||
		s.status.State == Held && now.Before(s.status.Until) && s.status.Until.Sub(now) >= atLeast &&
			t.suspended(s, now) == 0 {
		return t.evaluate(s, now, atLeast)
	}
	r := t.awaitRound()
	select {
	case <-r.done:
	case <-t.exited:
	case <-ctx.Done():
		st, _ := t.evaluate(t.snap.Load(), t.cfg.Clock.Now(), atLeast)
		return st, fmt.Errorf("lease %q: waiting for the store: %w", t.cfg.Name, ctx.Err())
	}
	return t.evaluate(t.snap.Load(), t.cfg.Clock.Now(), atLeast)
}

// evaluate turns snapshot s into a check's answer at now.
func (t *Tracker) evaluate(s *snapshot, now time.Time, atLeast time.Duration) (Status, error) {
	st := s.status
	slept := t.suspended(s, now)
	switch {
	case s.closed:
		return st, fmt.Errorf("lease %q: %w", t.cfg.Name, ErrClosed)
	case st.State == NotHeld:
		return st, s.cause
	case slept > 0:
		st.State, st.Holder = Unknown, ""
		return st, &RenewalFailedError{Name: t.cfg.Name, Err: suspendError{slept: slept}, Until: st.Until}
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

// Close stops renewing and waits for the renewer to return. The functions
// Lead and WithLeadership run see their ctx end with a cause matching
// ErrClosed.
//
// With ReleaseOnClose it then revokes the held term, so a successor can
// claim at once — but only after every running Lead function has
// returned, and waiting for them no longer than the promise (Until), so
// that a successor never starts while this process still does leader
// work it was promised time for. The revoke waits at most Duration/4;
// Close returns the store's error if it could not be confirmed.
//
// A StepDown that still waits for Lead functions when Close comes makes
// its release the same way, after them (StepDown returns its error; Close
// does only with ReleaseOnClose).
//
// Close is idempotent and safe to call concurrently; every call returns
// the same result. Checks after Close return ErrClosed. Do not call Close
// from a Lead function with ReleaseOnClose, or while a StepDown waits for
// it: it would wait for itself until the promise runs out.
func (t *Tracker) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.cancel(ErrClosed)
	})
	<-t.exited
	return t.closeErr
}

// awaitRound returns the store call a check should wait for: the one in
// flight, or a new one it asks the renewer to start at once.
func (t *Tracker) awaitRound() *round {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight != nil {
		return t.inflight
	}
	if s := t.snap.Load(); s.closed || s.status.State == NotHeld {
		// Answered already: a step-down (or Close) published after the
		// check looked. Asking the renewer now would make a follower
		// that stepped down claim at once; under t.mu, this and
		// stepDownNow's clearing of pending cannot miss each other.
		r := &round{done: make(chan struct{})}
		close(r.done)
		return r
	}
	if t.pending == nil {
		t.pending = &round{done: make(chan struct{})}
		t.next = time.Time{} // the renewer is about to call the store
		select {
		case t.kick <- struct{}{}:
		default: // a kick is already queued
		}
	}
	return t.pending
}

// hasPending reports whether a check is waiting for a store call that has
// not started yet.
func (t *Tracker) hasPending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending != nil
}

// setNext records when the renewer next calls the store (zero: now, or
// busy), unless a check has already asked for a call.
func (t *Tracker) setNext(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.next = at
	}
}

// run is the renewer: the only goroutine that calls the store and
// publishes snapshots.
func (t *Tracker) run() {
	defer close(t.exited)
	defer t.shutdown()
	var delay time.Duration // the first claim goes at once
	for {
		req, ok := t.wait(delay)
		switch {
		case !ok:
			return
		case req != nil:
			delay = t.stepDownNow(req)
			if t.owed != nil {
				return // closed during the step-down: shutdown releases
			}
		default:
			delay = t.attempt()
		}
	}
}

// wait blocks for delay, until a check asks for a store call, or until
// StepDown asks the renewer to step down (then it returns the request); it
// returns false once the tracker is closed. A wake much later than
// scheduled means the process (or its clock) was paused: the validity
// computed before the pause cannot be trusted, so a Held status drops to
// Unknown until the store confirms again.
func (t *Tracker) wait(delay time.Duration) (*stepDownRequest, bool) {
	clk := t.cfg.Clock
	if delay > 0 {
		scheduled := clk.Now().Add(delay)
		// next is set before the alarm is armed: the alarm is for a time,
		// not a delay, so a clock moved past it in between fires it at once.
		t.setNext(scheduled)
		alarm := clk.NewAlarm(scheduled)
		var req *stepDownRequest
	loop:
		for {
			select {
			case <-t.done:
				alarm.Stop()
				return nil, false
			case <-alarm.Chan():
				break loop
			case <-t.loss.lost:
				// The store says our term may be over: ask it now
				// rather than at the scheduled renewal.
				t.loss.fired()
				alarm.Stop()
				break loop
			case err := <-t.waiting.ch:
				// The term we wait out is over (claim after a short
				// random delay), or the watch broke (poll again).
				wake := clk.Now().Add(t.waiting.signalled(err, t.cfg))
				if !wake.Before(scheduled) {
					continue
				}
				alarm.Stop()
				if !wake.After(clk.Now()) {
					break loop
				}
				scheduled = wake
				t.setNext(scheduled)
				alarm = clk.NewAlarm(scheduled)
			case <-t.kick:
				if t.hasPending() {
					alarm.Stop()
					break loop
				}
			case req = <-t.stepDown:
				alarm.Stop()
				break loop
			}
		}
		t.setNext(time.Time{})
		if req != nil {
			return req, true
		}
		if late := clk.Now().Sub(scheduled); late > t.cfg.lateTimer() {
			if s := t.snap.Load(); s.status.State == Held {
				st := s.status
				st.State, st.Holder = Unknown, ""
				t.publish(&snapshot{status: st, cause: lateTimerError{late: late}}, noCall)
			}
		}
	}
	select {
	case <-t.done:
		return nil, false
	case req := <-t.stepDown:
		return req, true
	default:
		return nil, true
	}
}

// attempt makes one store call (extend if we have a grant, else claim),
// publishes the outcome and returns the delay before the next call.
func (t *Tracker) attempt() time.Duration {
	t.mu.Lock()
	r := t.pending
	if r == nil {
		r = &round{done: make(chan struct{})}
	}
	t.pending, t.inflight, t.next = nil, r, time.Time{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.inflight = nil
		t.mu.Unlock()
		close(r.done)
	}()

	clk := t.cfg.Clock
	// sent is read before the call: the store's term can have begun no
	// earlier, so sent + granted is a safe lower bound for its end.
	sent := clk.Now()
	slept := t.slept(sent)
	timeout := callTimeoutError{timeout: t.cfg.callTimeout()}
	if s := t.snap.Load(); s.status.State == Held {
		left := s.status.Until.Sub(sent)
		if d := t.suspended(s, sent); d > 0 || left <= 0 {
			// The validity ran out while we waited to retry, or the
			// host slept since it was confirmed: Until cannot be
			// trusted, and an ambiguous answer must not keep it.
			st := s.status
			st.State, st.Holder = Unknown, ""
			cause := s.cause
			switch {
			case d > 0:
				cause = suspendError{slept: d}
			case cause == nil:
				cause = errRanOut
			}
			t.publish(&snapshot{status: st, cause: cause}, noCall)
		} else if left < timeout.timeout {
			// Cut the call off when the validity ends, so Unknown is
			// published on time rather than when a hung call gives up.
			timeout = callTimeoutError{timeout: left, validity: true}
		}
	}
	var g Grant
	var err error
	var class outcome
	var latency time.Duration
	if t.hasGrant {
		latency, class, err = t.call(t.ctx, OpExtend, timeout, func(ctx context.Context) (err error) {
			g, err = t.cfg.Store.Extend(ctx, t.grant, 2*t.cfg.Duration)
			return err
		})
	} else {
		latency, class, err = t.call(t.ctx, OpClaim, timeout, func(ctx context.Context) (err error) {
			g, err = t.cfg.Store.Claim(ctx, t.cfg.Name, t.cfg.Holder, 2*t.cfg.Duration)
			return err
		})
	}
	now := clk.Now()
	switch class {
	case outcomeOK:
		return t.confirmed(g, sent, slept, now, latency)
	case outcomeDefinitive:
		return t.lost(err, now, latency)
	default:
		return t.ambiguous(err, now, latency)
	}
}

// call runs one store call under parent, cut off by timeout, counts it,
// and returns how long it took, the class of its answer and its error. A call cut off says so: its
// error wraps the timeout (which matches context.DeadlineExceeded) or
// Close's ErrClosed, not a bare "context canceled".
func (t *Tracker) call(parent context.Context, op Op, timeout callTimeoutError, fn func(ctx context.Context) error) (time.Duration, outcome, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	timer := t.cfg.Clock.AfterFunc(timeout.timeout, func() { cancel(timeout) })
	start := t.cfg.Clock.Now()
	t.counters.calls.begin()
	t.counters.callStart.Store(int64(start.Sub(t.base)))
	err := fn(ctx)
	end := t.cfg.Clock.Now()
	t.counters.callStart.Store(0)
	timer.Stop()
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	c := &t.counters
	c.lastLatency.Store(int64(end.Sub(start)))
	c.lastEnd.Store(int64(end.Sub(t.base)))
	return end.Sub(start), c.calls.end(op, err), err
}

// confirmed publishes the store's grant g, in answer to a call sent at
// sent (when the sleep meter read slept) that took latency and came at
// now, and returns the delay before the renewal.
func (t *Tracker) confirmed(g Grant, sent time.Time, slept time.Duration, now time.Time, latency time.Duration) time.Duration {
	t.grant, t.hasGrant = g, true
	t.retry.Reset()
	t.waiting.end()
	// Before publishing: once Held is seen, the term is watched.
	t.loss.follow(t.ctx, g)
	until := sent.Add(g.Duration - t.cfg.Margin)
	st := Status{State: Held, Holder: t.cfg.Holder, Until: until, Token: g.Token}
	if !now.Before(until) {
		// The answer came after the validity it granted had run out.
		st.State, st.Holder = Unknown, ""
		t.publish(&snapshot{status: st, cause: errRanOut}, latency)
		return t.retryDelay(now)
	}
	t.handedOver(now) // counted before Held is seen
	t.publish(&snapshot{status: st, slept: slept}, latency)
	interval := backoff.Duration(float64(until.Sub(sent)) * t.cfg.RenewFraction)
	return sent.Add(backoff.Jitter(interval, t.cfg.jitter(renewJitter))).Sub(now)
}

// lost publishes the store's definitive refusal err, an answer that took
// latency and came at now, and returns the delay before the next claim.
func (t *Tracker) lost(err error, now time.Time, latency time.Duration) time.Duration {
	wasExtending := t.hasGrant
	t.grant, t.hasGrant = Grant{}, false
	t.retry.Reset()
	t.loss.end()
	holder := holderOf(err)
	t.publish(&snapshot{status: Status{State: NotHeld, Holder: holder},
		cause: &NotLeaderError{Name: t.cfg.Name, Holder: holder, Err: err}}, latency)
	if wasExtending {
		// Our term is over; the lease may well be free. Claim again soon.
		return t.retry.Policy.Next(1)
	}
	if errors.Is(err, ErrHeld) {
		t.refusedAt = now // another holder's term was live a moment ago
	}
	return t.waiting.follow(t.ctx, err, t.cfg)
}

// handedOver counts a hand-over to this tracker, now Held at now, if it
// had been refused for another holder's term since it last held the
// lease: the leaderless gap it saw runs from that term's end as it learnt
// it — the watch's word that the term was over, or else its last refused
// claim, when the term was still live — to now.
func (t *Tracker) handedOver(now time.Time) {
	if t.refusedAt.IsZero() {
		return
	}
	from := t.refusedAt
	if t.waiting.overAt.After(from) {
		from = t.waiting.overAt
	}
	t.refusedAt, t.waiting.overAt = time.Time{}, time.Time{}
	t.counters.handOvers.Add(1)
	t.counters.handOverNanos.Add(int64(now.Sub(from)))
}

// claimDelay is the wait before the next claim while another holder has
// the lease.
func (t *Tracker) claimDelay() time.Duration { return t.cfg.claimDelay() }

// ambiguous publishes the store's ambiguous (or not sent) answer err, one
// that took latency and came at now, and returns the delay before the
// retry.
func (t *Tracker) ambiguous(err error, now time.Time, latency time.Duration) time.Duration {
	old := t.snap.Load()
	st := old.status
	if st.State == NotHeld && errors.Is(err, ErrNotSent) {
		// A claim the store did not send changed nothing: the holder
		// we were told of still stands, and so does its answer (and
		// the watch of its term); claim again when we would have
		// after that answer.
		if t.waiting.armed {
			return t.cfg.fallbackClaimDelay()
		}
		return t.claimDelay()
	}
	// Only a confirmation upgrades: an ambiguous failure keeps Held while
	// the validity lasts, and leaves Unknown (or a claim's NotHeld) as
	// Unknown — an ambiguous claim may have been applied.
	if !(t.hasGrant && st.State == Held && now.Before(st.Until) && t.suspended(old, now) == 0) {
		st.State, st.Holder = Unknown, ""
	}
	t.publish(&snapshot{status: st, cause: err, slept: old.slept}, latency)
	return t.retryDelay(now)
}

// retryDelay is the next backoff step after an ambiguous failure (see
// Config.retryPolicy), never past the end of a Held validity, so that the
// drop to Unknown is published on time.
func (t *Tracker) retryDelay(now time.Time) time.Duration {
	d := t.retry.Next()
	if s := t.snap.Load(); s.status.State == Held {
		if left := s.status.Until.Sub(now); left > 0 && left < d {
			d = left
		}
	}
	return d
}

// stepDownNow is StepDown's work, on the renewer: stop leading at once,
// release once the Lead functions have returned (waiting no longer than
// the promise), then stay a follower for one Duration before claiming.
func (t *Tracker) stepDownNow(req *stepDownRequest) time.Duration {
	s := t.snap.Load()
	t.loss.end()
	t.waiting.end()
	t.publish(&snapshot{status: Status{State: NotHeld}, cause: &NotLeaderError{Name: t.cfg.Name, Err: errSteppedDown}}, noCall)
	// A check that asked for a store call before NotHeld was published is
	// answered by it: the call it asked for must not go, or this follower
	// would claim again at once (awaitRound asks for no more).
	t.mu.Lock()
	r := t.pending
	t.pending = nil
	t.mu.Unlock()
	if r != nil {
		close(r.done)
	}
	select {
	case <-t.kick:
	default:
	}
	close(req.published)
	t.retry.Reset()
	if t.hasGrant {
		if !t.awaitLeaders(s, t.done) {
			// Closed while a Lead function still runs: keep the grant,
			// and let shutdown release once it has returned.
			req.held, t.owed = s, req
			return 0
		}
		req.err = t.release()
		t.grant, t.hasGrant = Grant{}, false
	}
	close(req.done)
	return t.cfg.Duration
}

// awaitLeaders waits until no Lead function runs, or the promise of s runs
// out, or stop closes; it returns false if stop closed first.
func (t *Tracker) awaitLeaders(s *snapshot, stop <-chan struct{}) bool {
	if s.status.State != Held {
		return true
	}
	alarm := t.cfg.Clock.NewAlarm(s.status.Until)
	defer alarm.Stop()
	for {
		t.runMu.Lock()
		n, ch := t.running, t.runDone
		t.runMu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ch:
		case <-alarm.Chan():
			return true
		case <-stop:
			return false
		}
	}
}

// publish makes s, a new snapshot, the one Check, Current, Lead and Report
// see; it is the only way a snapshot is published, and only the renewer
// calls it. It fills in s.since and s.changed (a snapshot whose status is
// the old one's shares its channel, so followers of Current wake only for
// a change), counts and logs a change of state, then wakes the followers.
// latency is how long the store call whose answer s is took, for the log,
// or noCall.
func (t *Tracker) publish(s *snapshot, latency time.Duration) {
	old := t.snap.Load()
	now := t.cfg.Clock.Now()
	s.since = old.since
	if s.status.State != old.status.State {
		s.since = now
		t.counters.transitions.Add(1)
		if old.status.State == Unknown && !old.closed {
			t.counters.unknownNanos.Add(int64(now.Sub(old.since)))
		}
	}
	// Logged before it is published, so that the record of a change comes
	// before any record of what followers do about it.
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
	t.markKnown(s) // before followers wake: one who sees Held sees Completed closed
	close(old.changed)
}

// shutdown publishes the final, closed snapshot and, once the Lead
// functions have returned (waiting no longer than the promise), releases
// the lease if configured or if a StepDown that Close interrupted owes it.
func (t *Tracker) shutdown() {
	t.loss.end()
	t.waiting.end()
	last := t.snap.Load()
	if t.owed != nil {
		last = t.owed.held
	}
	t.publish(&snapshot{status: Status{State: NotHeld}, closed: true}, noCall)
	if t.hasGrant && (t.cfg.ReleaseOnClose || t.owed != nil) {
		t.awaitLeaders(last, nil)
		err := t.release()
		if t.cfg.ReleaseOnClose {
			t.closeErr = err
		}
		if t.owed != nil {
			t.owed.err = err
		}
	}
	if t.owed != nil {
		close(t.owed.done)
	}
}

// release revokes the held term, bounded by the call timeout.
func (t *Tracker) release() error {
	// Not under t.ctx: Close has cancelled it, and releasing is part of
	// closing.
	latency, _, err := t.call(context.Background(), OpRevoke, callTimeoutError{timeout: t.cfg.callTimeout()},
		func(ctx context.Context) error { return t.cfg.Store.Revoke(ctx, t.grant) })
	t.logRelease(latency, err)
	if err == nil || errors.Is(err, ErrNotHeld) {
		return nil // released, or the term was over already
	}
	return fmt.Errorf("lease %q: release not confirmed: %w", t.cfg.Name, err)
}

// follow keeps the term of g watched after the store confirmed it. A new
// term gets a new watch (the old one ends). A confirmation right after the
// watch fired shows the signal was spurious: the term is watched again only
// from the next confirmation, so a notifier that keeps signalling costs at
// most one extra store call per renewal.
func (w *lossWatch) follow(parent context.Context, g Grant) {
	if w.notifier == nil {
		return
	}
	if g.Token == w.token {
		if w.signalled {
			w.signalled = false
			return
		}
		if w.armed {
			return
		}
	}
	w.end()
	ctx, stop := context.WithCancel(parent) // parent ends on Close
	w.token, w.armed, w.stop = g.Token, true, stop
	w.lost = w.notifier.Lost(ctx, g)
}

// fired records that the watch's channel closed, and ends the watch.
func (w *lossWatch) fired() {
	token := w.token
	w.end()
	w.token, w.signalled = token, true
}

// end stops watching.
func (w *lossWatch) end() {
	if w.stop != nil {
		w.stop()
	}
	*w = lossWatch{notifier: w.notifier}
}

// follow watches the term a refused claim's err names, if the store can
// watch it, and returns the wait before the next claim: while the watch
// runs, a fallback poll once a term, 2×Duration, in case it goes silent
// (the watch wakes the renewer sooner); without one, a claim interval. A
// term already watched keeps its watch; a term whose watch already said
// "over" is not watched again. A watch that has answered already is
// answered here, so that its wait is the one scheduled.
func (w *releaseWatch) follow(parent context.Context, err error, cfg Config) time.Duration {
	var held *HeldError
	if w.watcher == nil || !errors.As(err, &held) || held.Token == 0 || held.Token == w.over && held.Holder == w.overHolder {
		w.end()
		return cfg.claimDelay()
	}
	if !w.armed || w.token != held.Token || w.holder != held.Holder {
		w.end()
		ctx, stop := context.WithCancel(parent) // parent ends on Close
		w.token, w.holder, w.armed, w.stop = held.Token, held.Holder, true, stop
		w.ch = w.watcher.WatchRelease(ctx, held)
		if w.ch == nil {
			w.end()
			return cfg.claimDelay()
		}
	}
	select {
	case err := <-w.ch:
		return w.signalled(err, cfg)
	default:
		return cfg.fallbackClaimDelay()
	}
}

// signalled ends the watch that yielded err and returns how long to wait
// before the next claim: a short random delay when the term is over (nil),
// so that a hundred followers woken together do not claim at once; a claim
// interval when the watch broke, as if it had never been.
func (w *releaseWatch) signalled(err error, cfg Config) time.Duration {
	token, holder := w.token, w.holder
	w.end()
	if err != nil {
		return cfg.claimDelay()
	}
	w.over, w.overHolder, w.overAt = token, holder, cfg.Clock.Now()
	return backoff.Jitter(cfg.wakeSpread(), 1)
}

// end stops watching.
func (w *releaseWatch) end() {
	if w.stop != nil {
		w.stop()
	}
	*w = releaseWatch{watcher: w.watcher, over: w.over, overHolder: w.overHolder, overAt: w.overAt}
}

// holderOf is the holder a definitive store answer names, if any.
func holderOf(err error) string {
	var he *HeldError
	if errors.As(err, &he) {
		return he.Holder
	}
	var nh *NotHeldError
	if errors.As(err, &nh) {
		return nh.Holder
	}
	return ""
}
