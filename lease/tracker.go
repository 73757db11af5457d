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
	// lease (or that our term is over). Do not act as leader; the tracker
	// keeps claiming, and Changes reports when it leads again.
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
// remains; otherwise it waits for a renewal. A Tracker is safe for
// concurrent use; Close stops it.
//
// If the Store is also a LossNotifier, the tracker watches each term it
// holds and, when told the term may be over, renews at once instead of at
// the next scheduled renewal, so a revoked or taken-over term is reported
// as ErrNotLeader promptly. The signal alone changes nothing: only the
// store's answer to that renewal does (a confirmation keeps Held and the
// token). Until that answer, Check still answers from the cached promise.
type Tracker struct {
	cfg        Config
	maxPromise time.Duration // the most any check can ask: 2×Duration − Margin

	// snap is the latest immutable snapshot; only the renewer stores it.
	// Check's fast path is one atomic load and one clock read.
	snap atomic.Pointer[snapshot]

	// mu guards inflight and pending, the rounds checks wait on.
	mu       sync.Mutex
	inflight *round // the store call now running
	pending  *round // asked for by a check, not started yet
	kick     chan struct{}

	changes chan Status // capacity 1, latest wins

	ctx       context.Context // cancelled by Close: ends an in-flight call
	cancel    context.CancelFunc
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	exited    chan struct{} // closed when the renewer has returned
	closeErr  error         // the release error; written before exited closes

	// Owned by the renewer goroutine.
	grant    Grant
	hasGrant bool
	retry    backoff.Backoff // after ambiguous failures; reset by an answer
	loss     lossWatch
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

// snapshot is one published state. It is never modified once stored;
// changed is closed when a newer snapshot replaces it.
type snapshot struct {
	status Status
	// cause is, for Held, the ambiguous error of the latest failed renewal
	// (nil when the latest call succeeded); for Unknown, why; for NotHeld,
	// the *NotLeaderError.
	cause   error
	closed  bool
	changed chan struct{}
}

// round is one store call that checks can wait for.
type round struct{ done chan struct{} }

// NewTracker validates cfg and starts claiming the lease in the
// background: the first claim goes at once. Call Close to stop.
func NewTracker(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, jujuerrors.Trace(err)
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tracker{
		cfg:        cfg,
		maxPromise: 2*cfg.Duration - cfg.Margin,
		kick:       make(chan struct{}, 1),
		changes:    make(chan Status, 1),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		exited:     make(chan struct{}),
		retry:      backoff.Backoff{Policy: cfg.retryPolicy()},
	}
	t.loss.notifier, _ = cfg.Store.(LossNotifier)
	t.snap.Store(&snapshot{cause: errNotClaimed, changed: make(chan struct{})})
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
//   - the store says another holder has it or our term is over:
//     (NotHeld, *NotLeaderError matching ErrNotLeader). While NotHeld,
//     Check answers from cache; the tracker keeps claiming in the
//     background every RetryDelay;
//   - the store could not confirm: a *RenewalFailedError matching
//     ErrRenewalFailed, with State Held and the old Until while that
//     validity lasts, Unknown after it;
//   - ctx ended first: the cached status and an error wrapping ctx.Err().
//
// atLeast must be in [0, 2×Duration − Margin], the longest promise a claim
// can give; anything else is an invalid argument (errors.NotValid). After
// Close, Check returns NotHeld and an error matching ErrClosed.
func (t *Tracker) Check(ctx context.Context, atLeast time.Duration) (Status, error) {
	if s := t.snap.Load(); s.status.State == Held && atLeast >= 0 && atLeast <= t.maxPromise {
		// Held means now < Until, and at least atLeast left.
		if left := s.status.Until.Sub(t.cfg.Clock.Now()); left >= atLeast && left > 0 {
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
		s.status.State == Held && now.Before(s.status.Until) && s.status.Until.Sub(now) >= atLeast {
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
	switch {
	case s.closed:
		return st, fmt.Errorf("lease %q: %w", t.cfg.Name, ErrClosed)
	case st.State == NotHeld:
		return st, s.cause
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

// Changes returns a channel that receives the tracker's status whenever it
// changes: a claim, each renewal (a new Until), a loss, a downgrade to
// Unknown. It holds only the latest status — a slow reader skips
// intermediate ones and the renewer never waits for it. A Held status is a
// promise only until its Until. The channel is closed, after a final
// NotHeld status, when the tracker is closed. Read it from one goroutine.
func (t *Tracker) Changes() <-chan Status { return t.changes }

// Close stops renewing and waits for the renewer to return. With
// ReleaseOnClose it revokes the held term first (waiting at most
// CallTimeout on the clock) and returns the store's error if the revoke
// could not be confirmed. Close is idempotent and safe to call
// concurrently; every call returns the same result. Checks after Close
// return ErrClosed, and WithLeadership's contexts are cancelled.
func (t *Tracker) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.cancel()
	})
	<-t.exited
	return t.closeErr
}

// WithLeadership runs fn only if this tracker holds the lease, with a ctx
// that is cancelled when the leadership fn started under can no longer be
// promised: at the Until of the latest renewal (which already lies Margin
// before the store's end of term), on a definitive loss, when the term
// changes (a new token), on a late-timer downgrade, or on Close. It is the
// safe form of "check, then act". Ambiguous renewal failures do not cancel
// fn while the validity lasts.
//
// If the lease is not held, WithLeadership returns Check's error without
// calling fn. Otherwise it returns fn's error; when fn fails because its ctx
// was cancelled for the lease, the error also matches the lease error
// (ErrNotLeader, ErrRenewalFailed or ErrClosed). context.Cause(ctx) inside
// fn tells the same.
func (t *Tracker) WithLeadership(ctx context.Context, fn func(ctx context.Context) error) error {
	st, err := t.Check(ctx, 0)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	lost := make(chan error, 1)
	go func() { lost <- t.watch(st.Token, cancel, stop) }()
	err = func() error {
		defer close(stop) // even if fn panics: the watcher must not leak
		return fn(lctx)
	}()
	if cause := <-lost; cause != nil && err != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// watch cancels with a lease error when the term token stops being
// promised, and returns that error; it returns nil once stop closes.
func (t *Tracker) watch(token uint64, cancel context.CancelCauseFunc, stop <-chan struct{}) error {
	for {
		s := t.snap.Load()
		now := t.cfg.Clock.Now()
		var err error
		switch {
		case !s.closed && s.status.State == Held && s.status.Token != token:
			err = &NotLeaderError{Name: t.cfg.Name, Holder: s.status.Holder,
				Err: fmt.Errorf("term %d is over (now %d): %w", token, s.status.Token, ErrNotHeld)}
		default:
			_, err = t.evaluate(s, now, 0)
		}
		if err != nil {
			cancel(err)
			return err
		}
		alarm := t.cfg.Clock.NewAlarm(s.status.Until)
		select {
		case <-s.changed:
		case <-alarm.Chan():
		case <-stop:
			alarm.Stop()
			return nil
		}
		alarm.Stop()
	}
}

// awaitRound returns the store call a check should wait for: the one in
// flight, or a new one it asks the renewer to start at once.
func (t *Tracker) awaitRound() *round {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight != nil {
		return t.inflight
	}
	if t.pending == nil {
		t.pending = &round{done: make(chan struct{})}
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

// run is the renewer: the only goroutine that calls the store and
// publishes snapshots.
func (t *Tracker) run() {
	defer close(t.exited)
	defer t.shutdown()
	var delay time.Duration // the first claim goes at once
	for t.wait(delay) {
		delay = t.attempt()
	}
}

// wait blocks for delay, or until a check asks for a store call; it returns
// false once the tracker is closed. A wake much later than scheduled means
// the process (or its clock) was paused: the validity computed before the
// pause cannot be trusted, so a Held status drops to Unknown until the store
// confirms again.
func (t *Tracker) wait(delay time.Duration) bool {
	clk := t.cfg.Clock
	if delay > 0 {
		scheduled := clk.Now().Add(delay)
		// The renewer's wait is the tracker's only NewTimer (call timeouts
		// use AfterFunc); the tests tell "idle" by it.
		timer := clk.NewTimer(delay)
	loop:
		for {
			select {
			case <-t.done:
				timer.Stop()
				return false
			case <-timer.Chan():
				break loop
			case <-t.loss.lost:
				// The store says our term may be over: ask it now
				// rather than at the scheduled renewal.
				t.loss.fired()
				timer.Stop()
				break loop
			case <-t.kick:
				if t.hasPending() {
					timer.Stop()
					break loop
				}
			}
		}
		if late := clk.Now().Sub(scheduled); late > t.cfg.LateTimer {
			if s := t.snap.Load(); s.status.State == Held {
				st := s.status
				st.State, st.Holder = Unknown, ""
				t.publish(st, lateTimerError{late: late})
			}
		}
	}
	select {
	case <-t.done:
		return false
	default:
		return true
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
	t.pending, t.inflight = nil, r
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
	timeout := t.cfg.CallTimeout
	if s := t.snap.Load(); s.status.State == Held {
		left := s.status.Until.Sub(sent)
		if left <= 0 {
			// The validity ran out while we waited to retry.
			st := s.status
			st.State, st.Holder = Unknown, ""
			cause := s.cause
			if cause == nil {
				cause = errRanOut
			}
			t.publish(st, cause)
		} else if left < timeout {
			// Cut the call off when the validity ends, so Unknown is
			// published on time rather than when a hung call gives up.
			timeout = left
		}
	}
	ctx, cancel := context.WithCancel(t.ctx)
	timer := clk.AfterFunc(timeout, cancel)
	var g Grant
	var err error
	if t.hasGrant {
		g, err = t.cfg.Store.Extend(ctx, t.grant, 2*t.cfg.Duration)
	} else {
		g, err = t.cfg.Store.Claim(ctx, t.cfg.Name, t.cfg.Holder, 2*t.cfg.Duration)
	}
	timer.Stop()
	cancel()
	now := clk.Now()
	switch {
	case err == nil:
		return t.confirmed(g, sent, now)
	case errors.Is(err, ErrHeld) || errors.Is(err, ErrNotHeld):
		return t.lost(err)
	default:
		return t.ambiguous(err, now)
	}
}

func (t *Tracker) confirmed(g Grant, sent, now time.Time) time.Duration {
	t.grant, t.hasGrant = g, true
	t.retry.Reset()
	// Before publishing: once Held is seen, the term is watched.
	t.loss.follow(t.ctx, g)
	until := sent.Add(g.Duration - t.cfg.Margin)
	st := Status{State: Held, Holder: t.cfg.Holder, Until: until, Token: g.Token}
	if !now.Before(until) {
		// The answer came after the validity it granted had run out.
		st.State, st.Holder = Unknown, ""
		t.publish(st, errRanOut)
		return t.retryDelay(now)
	}
	t.publish(st, nil)
	interval := backoff.Duration(float64(until.Sub(sent)) * t.cfg.RenewFraction)
	return sent.Add(backoff.Jitter(interval, t.cfg.Jitter)).Sub(now)
}

func (t *Tracker) lost(err error) time.Duration {
	wasExtending := t.hasGrant
	t.grant, t.hasGrant = Grant{}, false
	t.retry.Reset()
	t.loss.end()
	holder := holderOf(err)
	t.publish(Status{State: NotHeld, Holder: holder},
		&NotLeaderError{Name: t.cfg.Name, Holder: holder, Err: err})
	if wasExtending {
		// Our term is over; the lease may well be free. Claim again soon.
		return t.retry.Policy.Next(1)
	}
	return backoff.Jitter(t.cfg.RetryDelay, t.cfg.Jitter)
}

func (t *Tracker) ambiguous(err error, now time.Time) time.Duration {
	st := t.snap.Load().status
	if st.State == NotHeld && errors.Is(err, ErrNotSent) {
		// A claim the store did not send changed nothing: the holder
		// we were told of still stands, and so does its answer; claim
		// again when we would have after that answer.
		return backoff.Jitter(t.cfg.RetryDelay, t.cfg.Jitter)
	}
	// Only a confirmation upgrades: an ambiguous failure keeps Held while
	// the validity lasts, and leaves Unknown (or a claim's NotHeld) as
	// Unknown — an ambiguous claim may have been applied.
	if !(t.hasGrant && st.State == Held && now.Before(st.Until)) {
		st.State, st.Holder = Unknown, ""
	}
	t.publish(st, err)
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

// publish stores a new snapshot, wakes watchers of the old one, and offers
// the status on Changes if it differs. Only the renewer calls it.
func (t *Tracker) publish(st Status, cause error) {
	t.store(&snapshot{status: st, cause: cause, changed: make(chan struct{})})
}

func (t *Tracker) store(s *snapshot) {
	old := t.snap.Swap(s)
	close(old.changed)
	if old.closed != s.closed || old.status.State != s.status.State ||
		old.status.Holder != s.status.Holder || old.status.Token != s.status.Token ||
		!old.status.Until.Equal(s.status.Until) {
		// Latest wins: replace an unread status rather than wait. The
		// renewer is the only sender, so after the drain there is room.
		select {
		case <-t.changes:
		default:
		}
		select {
		case t.changes <- s.status:
		default:
		}
	}
}

// shutdown releases the lease if configured and publishes the final,
// closed snapshot.
func (t *Tracker) shutdown() {
	t.loss.end()
	if t.cfg.ReleaseOnClose && t.hasGrant {
		t.closeErr = t.release()
	}
	t.store(&snapshot{status: Status{State: NotHeld}, closed: true, changed: make(chan struct{})})
	close(t.changes)
}

func (t *Tracker) release() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := t.cfg.Clock.AfterFunc(t.cfg.CallTimeout, cancel)
	defer timer.Stop()
	err := t.cfg.Store.Revoke(ctx, t.grant)
	if err == nil || errors.Is(err, ErrNotHeld) {
		return nil // released, or the term was over already
	}
	return fmt.Errorf("lease %q: release on close not confirmed: %w", t.cfg.Name, err)
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
