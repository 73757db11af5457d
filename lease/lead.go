package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	jujuerrors "github.com/juju/errors"
)

// Lead runs fn each time this tracker comes to hold the lease, one run at a
// time, and returns when ctx ends (ctx.Err()), when the tracker is closed
// (an error matching ErrClosed), or with fn's own error.
//
// fn gets the Status it leads under and a ctx that ends as soon as that
// leadership can no longer be promised, with a cause (context.Cause)
// matching ErrNotLeader at a definitive loss, a new term or a step-down;
// ErrRenewalFailed once the host's clocks show a stopped monotonic clock
// (a suspend, a paused VM), or at the Until of the latest confirmed
// renewal when no renewal was confirmed in time; or
// ErrClosed at Close. It also ends when Lead's ctx does, with that ctx's
// cause. An ambiguous renewal failure while the promise still stands does
// not end it. Pass st.Token to what you guard, and stop on ctx.Done.
//
// When fn returns, Lead runs it again only once the tracker has stopped
// leading and leads again. An error fn returns because its ctx ended (one
// matching context.Canceled or the ctx's cause) is not fn's own: Lead goes
// on. Any other error from fn ends Lead and is returned as is. A nil fn is
// refused at once, with a NotValid error (github.com/juju/errors).
func (t *Tracker) Lead(ctx context.Context, fn func(ctx context.Context, st Status) error) error {
	if fn == nil {
		return t.nilFunc("Lead")
	}
	for {
		s, err := t.awaitHeld(ctx)
		if err != nil {
			return err
		}
		ran, cause, err := t.runLeader(ctx, s, fn)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !causedBy(err, cause):
			return err
		}
		if ran && cause == nil {
			// fn returned while still leading: wait for this leadership
			// to end before the next.
			if t.watch(s.status.Token, nil, ctx.Done()) == nil {
				return ctx.Err()
			}
		}
	}
}

// WithLeadership is Lead's one-run form: it runs fn once if this tracker
// holds the lease now, with a ctx that ends as Lead's does, and returns
// fn's error. When fn fails because its ctx ended for the lease, the error
// also matches the lease error (ErrNotLeader, ErrRenewalFailed or
// ErrClosed); context.Cause(ctx) inside fn tells the same.
//
// If the lease is not held, WithLeadership returns Check's error without
// calling fn. A nil fn is refused at once, with a NotValid error, held or
// not.
func (t *Tracker) WithLeadership(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return t.nilFunc("WithLeadership")
	}
	if _, err := t.Check(ctx, 0); err != nil {
		return err
	}
	s := t.snap.Load()
	ran, cause, err := t.runLeader(ctx, s, func(ctx context.Context, _ Status) error { return fn(ctx) })
	switch {
	case !ran:
		return cause
	case cause != nil && err != nil && errors.Is(err, context.Canceled) && !errors.Is(err, cause):
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// nilFunc is the refusal of a nil function given to method.
func (t *Tracker) nilFunc(method string) error {
	return jujuerrors.NotValidf("lease %q: nil %s function (must be the work to run while leading)", t.cfg.Name, method)
}

// awaitHeld waits until the tracker holds the lease with a promise ahead,
// and returns that snapshot.
func (t *Tracker) awaitHeld(ctx context.Context) (*snapshot, error) {
	for {
		s := t.snap.Load()
		switch {
		case s.closed:
			return nil, fmt.Errorf("lease %q: %w", t.cfg.Name, ErrClosed)
		case s.status.State == Held && t.cfg.Clock.Now().Before(s.status.Until):
			return s, nil
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// runLeader runs fn under the leadership of s, unless that is already over
// (ran false, and cause says why). cause is the lease error that ended
// fn's ctx, nil if fn returned first.
func (t *Tracker) runLeader(ctx context.Context, s *snapshot, fn func(context.Context, Status) error) (ran bool, cause, err error) {
	token := s.status.Token
	t.leaders.enter() // before the promise is checked (DESIGN.md, "The renewer and checks")
	if cause := t.promised(t.snap.Load(), token); cause != nil {
		t.leaders.leave()
		return false, cause, nil
	}

	t.logLeader(leaderStarted, s.status, nil)
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaderKey{}, t))
	defer cancel(nil)
	stop := make(chan struct{})
	lost := make(chan error, 1)
	go func() { lost <- t.watch(token, cancel, stop) }()
	err = func() (err error) {
		defer func() {
			close(stop) // even if fn panics: the watcher must not leak
			cause = <-lost
			why := cause // logged before the count drops
			if why == nil || err != nil && !causedBy(err, cause) {
				why = err // fn returned first, or failed on its own
			}
			t.logLeader(leaderEnded, s.status, why)
			t.leaders.leave()
		}()
		return fn(lctx, s.status)
	}()
	return true, cause, err
}

// leaders counts the Lead (and WithLeadership) functions running, so that
// a release can wait for them; done is closed when n drops to zero.
type leaders struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func (l *leaders) enter() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.done = make(chan struct{})
	}
	l.n++
}

func (l *leaders) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n--; l.n == 0 {
		close(l.done)
	}
}

// running reports whether a function runs, and the channel closed once
// none does.
func (l *leaders) running() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n > 0, l.done
}

// leaderKey is the key of the value, the *Tracker, in the ctx of the
// functions Lead and WithLeadership run: StepDown called with that ctx
// does not wait for the release, which waits for the function itself.
type leaderKey struct{}

// causedBy reports whether fn's error err comes from its leadership ctx
// ending with cause.
func causedBy(err, cause error) bool {
	return cause != nil && (errors.Is(err, context.Canceled) || errors.Is(err, cause))
}

// promised returns nil while snapshot s still promises the term token, and
// the lease error that says why not otherwise.
func (t *Tracker) promised(s *snapshot, token uint64) error {
	if !s.closed && s.status.State == Held && s.status.Token != token {
		return &NotLeaderError{Name: t.cfg.Name,
			Err: fmt.Errorf("term %d is over (this tracker now leads term %d): %w", token, s.status.Token, leasestore.ErrNotHeld)}
	}
	_, err := t.evaluate(s, t.cfg.Clock.Now(), 0)
	return err
}

// watch waits until the term token stops being promised, calls cancel (if
// not nil) with the lease error that says why, and returns it; it returns
// nil once stop closes.
func (t *Tracker) watch(token uint64, cancel context.CancelCauseFunc, stop <-chan struct{}) error {
	for {
		s := t.snap.Load()
		if err := t.promised(s, token); err != nil {
			if t.snap.Load() != s {
				continue // s went stale while judged (DESIGN.md)
			}
			if cancel != nil {
				cancel(err)
			}
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

// Current returns the tracker's latest status and a channel that is closed
// when it next changes (a new Until included). Any number of goroutines
// may follow it, each at its own pace, blocking no one; a follower that
// comes back late sees the latest status, not a backlog:
//
//	for {
//		st, changed := tr.Current()
//		show(st)
//		select {
//		case <-changed:
//		case <-ctx.Done():
//			return
//		}
//	}
//
// A Held status is a promise only until its Until. After Close the status
// is NotHeld and its channel is never closed: stop on your own ctx. Once
// the host's clocks show a stopped monotonic clock (a suspend, a paused VM:
// Config.Clock) Current says Unknown at once.
func (t *Tracker) Current() (Status, <-chan struct{}) {
	s := t.snap.Load()
	if s.status.State != Held {
		return s.status, s.changed
	}
	if seen := t.readClocks(t.cfg.Clock.Now()); clockStopped(s.clocks, seen) != nil {
		t.sched.await(&t.snap, s, seen) // the renewer publishes Unknown, and asks the store
		st := s.status
		st.State, st.Holder = Unknown, ""
		return st, s.changed
	}
	return s.status, s.changed
}

// StepDown makes this tracker stop leading without closing it: once the
// renewer takes the request (after a store call in flight), its status
// becomes NotHeld and Lead functions see their ctx end; it releases the
// term once every running Lead function has returned (waiting no longer
// than the promise), and claims again no sooner than one Duration later.
// While it does not lead, StepDown only holds back the next claim.
//
// StepDown returns once released, with the store's error if the release
// could not be confirmed (the term then runs out on its own), an error
// wrapping ctx.Err() if ctx ends first (the step-down goes on), or an
// error matching ErrClosed if the tracker was closed before the request
// was taken. Called with the ctx of a function Lead or WithLeadership
// runs (or one derived from it), it returns nil once NotHeld is
// published, and the release, which waits for that function, is only
// logged; called from there with any other ctx, it would wait for its own
// function until the promise runs out.
func (t *Tracker) StepDown(ctx context.Context) error {
	req := &stepDownRequest{published: make(chan struct{}), done: make(chan struct{})}
	fromLeader := ctx.Value(leaderKey{}) == t
	if fromLeader {
		ctx = context.WithoutCancel(ctx) // it ends as NotHeld is published
	}
	select {
	case t.sched.stepDown <- req:
	case <-t.life.exited:
		return fmt.Errorf("lease %q: step down: %w", t.cfg.Name, ErrClosed)
	case <-ctx.Done():
		return fmt.Errorf("lease %q: step down: %w", t.cfg.Name, ctx.Err())
	}
	if fromLeader {
		<-req.published // published at once: the renewer has taken req
		return nil
	}
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		return fmt.Errorf("lease %q: step down (still under way): %w", t.cfg.Name, ctx.Err())
	}
}
