package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// renewer is the state of the renewer goroutine (run and what it calls):
// no other goroutine touches it, so it needs no lock.
type renewer struct {
	grant    leasestore.Grant // the term held, while hasGrant
	hasGrant bool
	// owed is a StepDown whose release Close interrupted: shutdown makes
	// it once the Lead functions have returned, then answers it.
	owed    *stepDownRequest
	retry   backoff.Backoff // after ambiguous failures; reset by an answer
	loss    lossWatch       // our term, while held
	waiting releaseWatch    // another holder's term, while NotHeld
	// refusedAt is when the latest claim refused for another holder's
	// term was answered since this tracker last held (see handedOver).
	refusedAt time.Time
	// recent is the recent renew latency: the latest answered call's
	// latency, plus how late the renewal was sent (sentLate), or the
	// figure before it halved per call since, if longer (renewalIn).
	recent, sentLate time.Duration
	// due is when the renewal of the term just confirmed is due at the
	// latest (its jitter only brings it earlier); zero when the next call
	// is no such renewal. lateEpisode is set from a late renewal to the
	// next one on time: one record per episode (late.go).
	due         time.Time
	lateEpisode bool
}

// run is the renewer: the only goroutine that calls the store and
// publishes snapshots.
func (t *Tracker) run() {
	defer close(t.life.exited)
	defer t.shutdown()
	var delay time.Duration // the first claim goes at once
	for {
		req, w, ok := t.wait(delay)
		switch {
		case !ok:
			return
		case req != nil:
			delay = t.stepDownNow(req)
			if t.renewer.owed != nil {
				return // closed during the step-down: shutdown releases
			}
		default:
			delay = t.attempt(w)
		}
	}
}

// wait blocks for delay, until a check asks for a store call, or until
// StepDown asks to step down (it returns the request); false once closed.
// Otherwise it returns what the renewer read as the wait began, which the
// store call it ends in is explained against: a renewal that wakes late
// goes at once and, once sent, is counted and explained (late.go), and
// demotes nothing.
func (t *Tracker) wait(delay time.Duration) (*stepDownRequest, lateWait, bool) {
	var w lateWait
	if delay > 0 {
		now := t.cfg.Clock.Now()
		w = t.beginWait(now)
		req, _, ok := t.waitUntil(now.Add(delay))
		if !ok {
			return nil, lateWait{}, false
		}
		t.sched.setNext(time.Time{})
		if req != nil {
			return req, lateWait{}, true
		}
	}
	select {
	case <-t.life.done:
		return nil, lateWait{}, false
	case req := <-t.sched.stepDown:
		return req, lateWait{}, true
	default:
		return nil, w, true
	}
}

// waitUntil is wait's sleep until scheduled, or sooner when a watch, a
// check or StepDown wakes it; it returns the time it slept to (a release
// watch moves it earlier), and false once closed.
func (t *Tracker) waitUntil(scheduled time.Time) (*stepDownRequest, time.Time, bool) {
	clk := t.cfg.Clock
	t.sched.setNext(scheduled) // before the alarm: a clock moved past it fires it at once
	alarm := clk.NewAlarm(scheduled)
	for {
		select {
		case <-t.life.done:
			alarm.Stop()
			return nil, scheduled, false
		case <-alarm.Chan():
			return nil, scheduled, true
		case <-t.renewer.loss.lost: // ask the store now
			t.renewer.loss.fired()
			alarm.Stop()
			return nil, scheduled, true
		case err := <-t.renewer.waiting.ch:
			wake := clk.Now().Add(t.renewer.waiting.signalled(err, t.cfg))
			if !wake.Before(scheduled) {
				continue
			}
			alarm.Stop()
			if !wake.After(clk.Now()) {
				return nil, scheduled, true
			}
			scheduled = wake
			t.sched.setNext(scheduled)
			alarm = clk.NewAlarm(scheduled)
		case <-t.sched.kick:
			if t.sched.hasPending() {
				alarm.Stop()
				return nil, scheduled, true
			}
		case req := <-t.sched.stepDown:
			alarm.Stop()
			return req, scheduled, true
		}
	}
}

// attempt makes one store call (extend if we have a grant, else claim),
// at the end of the wait w, publishes the outcome and returns the delay
// before the next call.
func (t *Tracker) attempt(w lateWait) time.Duration {
	// sent is before the call: sent + granted bounds the term's end.
	r, sent, clocks := t.sched.begin(t.cfg.Clock, t.clocks)
	defer t.sched.end(r)
	t.renewer.due = time.Time{} // until a confirmation schedules a renewal
	defer func() { t.renewer.sentLate = 0 }()

	clk := t.cfg.Clock
	t.renewalSent(w, sent)
	timeout := callTimeoutError{timeout: t.cfg.callTimeout()}
	if s := t.snap.Load(); s.status.State == Held {
		left := s.status.Until.Sub(sent)
		if stopped := clockStopped(s.clocks, clocks); stopped != nil || left <= 0 {
			// Until ran out, or the monotonic clock may have stopped:
			// an ambiguous answer must not keep it.
			st := s.status
			st.State, st.Holder = Unknown, ""
			cause := s.cause
			switch {
			case stopped != nil:
				cause = stopped
			case cause == nil:
				cause = errRanOut
			}
			t.publish(&snapshot{status: st, cause: cause}, noCall)
		} else if left < timeout.timeout {
			timeout = callTimeoutError{timeout: left, validity: true}
		}
	}
	var g leasestore.Grant
	var err error
	var class leasestore.Class
	var latency time.Duration
	if t.renewer.hasGrant {
		latency, class, err = t.call(t.life.ctx, leasestore.OpExtend, timeout, func(ctx context.Context) (err error) {
			g, err = t.cfg.Store.Extend(ctx, t.renewer.grant, 2*t.cfg.Duration)
			return err
		})
	} else {
		latency, class, err = t.call(t.life.ctx, leasestore.OpClaim, timeout, func(ctx context.Context) (err error) {
			g, err = t.cfg.Store.Claim(ctx, t.cfg.Name, t.cfg.Holder, 2*t.cfg.Duration)
			return err
		})
	}
	now := clk.Now()
	switch class {
	case leasestore.ClassOK:
		t.renewer.recent = max(t.renewer.sentLate+latency, t.renewer.recent/2)
		return t.confirmed(g, sent, clocks, now, latency)
	case leasestore.ClassDefinitive:
		t.renewer.recent = max(t.renewer.sentLate+latency, t.renewer.recent/2)
		return t.lost(err, now, latency)
	default:
		return t.ambiguous(err, now, latency)
	}
}

// call runs one store call under parent, cut off by timeout, counts it,
// and returns how long it took, the class of its answer and its error,
// which wraps the cause of a cut-off (the timeout, or ErrClosed).
func (t *Tracker) call(parent context.Context, op leasestore.Op, timeout callTimeoutError, fn func(ctx context.Context) error) (time.Duration, leasestore.Class, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	timer := t.cfg.Clock.AfterFunc(timeout.timeout, func() { cancel(timeout) })
	c := &t.counters
	start := t.cfg.Clock.Now()
	done := c.calls.Begin(op)
	c.callStart.Store(int64(start.Sub(c.base)))
	err := fn(ctx)
	end := t.cfg.Clock.Now()
	c.callStart.Store(0)
	timer.Stop()
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	c.lastLatency.Store(int64(end.Sub(start)))
	c.lastEnd.Store(int64(end.Sub(c.base)))
	return end.Sub(start), done(err), err
}

// confirmed publishes the grant g answering a call sent at sent (when the
// host's clocks read clocks), and returns the delay before the renewal.
func (t *Tracker) confirmed(g leasestore.Grant, sent time.Time, clocks clockReading, now time.Time, latency time.Duration) time.Duration {
	t.renewer.grant, t.renewer.hasGrant = g, true
	t.renewer.retry.Reset()
	t.renewer.waiting.end()
	// Before publishing: once Held is seen, the term is watched.
	t.renewer.loss.follow(t.life.ctx, g)
	until := sent.Add(g.Duration - t.cfg.Margin)
	st := Status{State: Held, Holder: t.cfg.Holder, Until: until, Token: g.Token}
	if !now.Before(until) {
		// The answer came after the validity it granted had run out.
		st.State, st.Holder = Unknown, ""
		t.publish(&snapshot{status: st, cause: errRanOut}, latency)
		return t.retryDelay(now)
	}
	t.handedOver(now) // counted before Held is seen
	t.publish(&snapshot{status: st, clocks: clocks}, latency)
	interval := t.renewalIn(until.Sub(sent))
	t.renewer.due = sent.Add(interval)
	return sent.Add(backoff.Jitter(interval, t.cfg.jitter(renewJitter))).Sub(now)
}

// renewalIn is when, after a call sent with validity ahead of it, the
// renewal goes: after RenewFraction of it, or earlier if that would leave
// less than renewLatencies × the recent renew latency when it is sent,
// but never before a quarter of that interval (DESIGN.md, "Renewing
// early").
func (t *Tracker) renewalIn(validity time.Duration) time.Duration {
	interval := backoff.Duration(float64(validity) * t.cfg.RenewFraction)
	if need := renewLatencies * t.renewer.recent; validity-interval < need {
		interval = max(validity-need, interval/4)
	}
	return interval
}

// lost publishes the store's definitive refusal err, and returns the delay
// before the next claim.
func (t *Tracker) lost(err error, now time.Time, latency time.Duration) time.Duration {
	wasExtending := t.renewer.hasGrant
	t.renewer.grant, t.renewer.hasGrant = leasestore.Grant{}, false
	t.renewer.retry.Reset()
	t.renewer.loss.end()
	holder := holderOf(err)
	t.publish(&snapshot{status: Status{State: NotHeld, Holder: holder},
		cause: &NotLeaderError{Name: t.cfg.Name, Holder: holder, Err: err}}, latency)
	if wasExtending {
		// Our term is over; the lease may well be free. Claim again soon.
		return t.renewer.retry.Policy.Next(1)
	}
	if errors.Is(err, leasestore.ErrHeld) {
		t.renewer.refusedAt = now // another holder's term was live a moment ago
	}
	return t.renewer.waiting.follow(t.life.ctx, err, t.cfg)
}

// handedOver counts a hand-over to this tracker, Held at now, if a claim
// was refused for another holder's term since it last held; the gap runs
// to now from the later of that refusal and the watch's word that the
// term was over (Report.HandOverGaps).
func (t *Tracker) handedOver(now time.Time) {
	if t.renewer.refusedAt.IsZero() {
		return
	}
	from := t.renewer.refusedAt
	if t.renewer.waiting.overAt.After(from) {
		from = t.renewer.waiting.overAt
	}
	t.renewer.refusedAt, t.renewer.waiting.overAt = time.Time{}, time.Time{}
	t.counters.handOvers.Add(1)
	t.counters.handOverNanos.Add(int64(now.Sub(from)))
}

// ambiguous publishes the store's ambiguous (or not sent) answer err, and
// returns the delay before the retry.
func (t *Tracker) ambiguous(err error, now time.Time, latency time.Duration) time.Duration {
	old := t.snap.Load()
	st := old.status
	if st.State == NotHeld && errors.Is(err, leasestore.ErrNotSent) {
		// A claim not sent changed nothing: keep the holder's answer
		// and its watch, and claim when that answer said.
		if t.renewer.waiting.armed {
			return t.cfg.fallbackClaimDelay()
		}
		return t.cfg.claimDelay()
	}
	// Only a confirmation upgrades: an ambiguous failure keeps Held while
	// the validity lasts, and leaves Unknown (or a claim's NotHeld) as
	// Unknown — an ambiguous claim may have been applied.
	if !(t.renewer.hasGrant && st.State == Held && now.Before(st.Until) && t.stopped(old, now) == nil) {
		st.State, st.Holder = Unknown, ""
	}
	t.publish(&snapshot{status: st, cause: stillStopped(old, err), clocks: old.clocks}, latency)
	return t.retryDelay(now)
}

// retryDelay is the next backoff step after an ambiguous failure (see
// Config.retryPolicy), never past the end of a Held validity, so that the
// drop to Unknown is published on time.
func (t *Tracker) retryDelay(now time.Time) time.Duration {
	d := t.renewer.retry.Next()
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
	t.renewer.loss.end()
	t.renewer.waiting.end()
	t.publish(&snapshot{status: Status{State: NotHeld}, cause: &NotLeaderError{Name: t.cfg.Name, Err: errSteppedDown}}, noCall)
	t.sched.dropPending() // answered by NotHeld: the call asked for must not go
	close(req.published)
	t.renewer.retry.Reset()
	if t.renewer.hasGrant {
		if !t.awaitLeaders(s, t.life.done) {
			// Closed while a Lead function still runs: keep the grant,
			// and let shutdown release once it has returned.
			req.held, t.renewer.owed = s, req
			return 0
		}
		req.err = t.release()
		t.renewer.grant, t.renewer.hasGrant = leasestore.Grant{}, false
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
		running, ch := t.leaders.running()
		if !running {
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

// shutdown publishes the final, closed snapshot and, once the Lead
// functions have returned (waiting no longer than the promise), releases
// the lease if configured or if a StepDown that Close interrupted owes it.
func (t *Tracker) shutdown() {
	t.renewer.loss.end()
	t.renewer.waiting.end()
	last := t.snap.Load()
	if t.renewer.owed != nil {
		last = t.renewer.owed.held
	}
	t.publish(&snapshot{status: Status{State: NotHeld}, closed: true}, noCall)
	if t.renewer.hasGrant && (t.cfg.ReleaseOnClose || t.renewer.owed != nil) {
		t.awaitLeaders(last, nil)
		err := t.release()
		if t.cfg.ReleaseOnClose {
			t.life.closeErr = err
		}
		if t.renewer.owed != nil {
			t.renewer.owed.err = err
		}
	}
	if t.renewer.owed != nil {
		close(t.renewer.owed.done)
	}
}

// release revokes the held term, bounded by the call timeout.
func (t *Tracker) release() error {
	// Not under t.life.ctx, which Close has cancelled.
	latency, _, err := t.call(context.Background(), leasestore.OpRevoke, callTimeoutError{timeout: t.cfg.callTimeout()},
		func(ctx context.Context) error { return t.cfg.Store.Revoke(ctx, t.renewer.grant) })
	t.logRelease(t.renewer.grant.Token, latency, err)
	if err == nil || errors.Is(err, leasestore.ErrNotHeld) {
		return nil // released, or the term was over already
	}
	return fmt.Errorf("lease %q: release not confirmed: %w", t.cfg.Name, err)
}

// holderOf is the holder a definitive store answer names, if any.
func holderOf(err error) string {
	var he *leasestore.HeldError
	if errors.As(err, &he) {
		return he.Holder
	}
	var nh *leasestore.NotHeldError
	if errors.As(err, &nh) {
		return nh.Holder
	}
	return ""
}
