package lease

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Report is a point-in-time picture of a Tracker for people, logs, status
// pages and metrics. Reading it costs a few atomic loads and a brief lock
// that no Check answered from cache takes.
type Report struct {
	Name string
	// State and Holder are as Check(ctx, 0) would answer now: a Held
	// status whose Until has passed unconfirmed reads Unknown.
	State  State
	Holder string
	// Token is the fencing token of the term last confirmed: 0 before
	// the first, and kept once that term is over (NotHeld, Closed), so it
	// names this tracker's last term, never Holder's.
	Token uint64
	Until time.Time // the promise, while State is Held
	// Since is when the tracker entered State (for a Held status that
	// ran out, its Until).
	Since time.Time
	// Err is why the lease is not Held, as Check would say it, or, while
	// Held, the latest ambiguous renewal failure; nil when the last call
	// succeeded.
	Err    error
	Closed bool

	// Calls counts this tracker's store calls by operation and outcome, as
	// stores count theirs: Calls.Claim.OK is the terms its claims were
	// granted, Calls.Extend.OK the renewals the store confirmed. InFlight
	// is 1 while a call is in flight (see InCall).
	Calls leasestore.Report
	// Losses counts the terms this tracker held that the store said were
	// over (a definitive answer to an extend: Calls.Extend.Definitive).
	Losses uint64
	// Denials counts the claims the store refused because another holder
	// has the lease (Calls.Claim.Definitive): a follower's routine, not a
	// loss.
	Denials uint64
	// Transitions counts the changes of State.
	Transitions uint64
	// UnknownFor is the total time spent Unknown, the current stretch
	// included.
	UnknownFor time.Duration
	// HandOvers counts the times this tracker came to hold the lease
	// after a claim of its was refused for another holder's term.
	// HandOverGaps is their leaderless gaps in all, each to its own Held
	// from when a ReleaseWatcher said that term was over, or else from its
	// last refused claim. HandOverGaps / HandOvers is the mean gap.
	HandOvers    uint64
	HandOverGaps time.Duration
	// LastCall is how long the last finished store call took; LastCallEnd
	// is when it finished (zero before the first).
	LastCall    time.Duration
	LastCallEnd time.Time
	// InCall is how long the store call now in flight has run; zero when
	// none is.
	InCall time.Duration
	// NextCall is when the renewer will next call the store, if nothing
	// asks it sooner; zero while a call is in flight or asked for, or while
	// the renewer was busy as the Report was taken.
	NextCall time.Time

	// LateRenewals counts the renewals of a held lease whose timer fired
	// more than Margin/4 late. Each went at once and demoted nothing (a
	// late timer leaves the promise exact); each is counted again under
	// the first of the causes below that the process saw across its
	// wait, or under none (LateRenewals less their sum): the host
	// suspended; the wall clock stepped against the monotonic one; the
	// process's cgroup throttled its CPU (cgroup v2 cpu.stat, where
	// readable); a stop-the-world GC pause, or a goroutine kept waiting
	// to run (runtime/metrics, sampled by the runtime), of at least
	// Margin/8. README.md, "Under load", says what to do about each.
	LateRenewals  uint64
	LateSuspend   uint64
	LateClockStep uint64
	LateThrottled uint64
	LateGCPause   uint64
	LateScheduler uint64
}

// Report returns the tracker's state and counters now.
func (t *Tracker) Report() Report {
	// next is read before and after the rest: only if the renewer was
	// waiting throughout is the Report one state, with its NextCall.
	next := t.sched.nextCall()
	s := t.snap.Load()
	now := t.cfg.Clock.Now()
	c := &t.counters
	r := Report{
		Name: t.cfg.Name, State: s.status.State, Holder: s.status.Holder, Token: s.lastToken,
		Until: s.status.Until, Since: s.since, Err: s.cause, Closed: s.closed,
		Calls: c.calls.StoreReport(), Transitions: c.transitions.Load(),
		UnknownFor: time.Duration(c.unknownNanos.Load()),
		HandOvers:  c.handOvers.Load(), HandOverGaps: time.Duration(c.handOverNanos.Load()),
		LastCall: time.Duration(c.lastLatency.Load()),

		LateSuspend: c.late[lateSuspend].Load(), LateClockStep: c.late[lateClockStep].Load(),
		LateThrottled: c.late[lateThrottled].Load(), LateGCPause: c.late[lateGC].Load(),
		LateScheduler: c.late[lateScheduler].Load(),
	}
	r.LateRenewals = c.late[lateUnexplained].Load() + r.LateSuspend + r.LateClockStep +
		r.LateThrottled + r.LateGCPause + r.LateScheduler
	switch {
	case s.closed:
		r.Err = nil
	case s.status.State == Unknown:
		r.UnknownFor += now.Sub(s.since)
		fallthrough
	case s.status.State == NotHeld:
		_, r.Err = t.evaluate(s, now, 0) // as Check says it
	case t.stopped(s, now) != nil: // Unknown, as Check says, since now
		var st Status
		st, r.Err = t.evaluate(s, now, 0)
		r.State, r.Holder, r.Since = st.State, st.Holder, now
	case !now.Before(s.status.Until): // ran out unpublished: Unknown since Until
		var st Status
		st, r.Err = t.evaluate(s, now, 0)
		r.State, r.Holder, r.Since = st.State, st.Holder, s.status.Until
		r.UnknownFor += now.Sub(s.status.Until)
	}
	r.Losses, r.Denials = r.Calls.Extend.Definitive, r.Calls.Claim.Definitive
	if end := c.lastEnd.Load(); end != 0 {
		r.LastCallEnd = c.base.Add(time.Duration(end))
	}
	if start := c.callStart.Load(); start != 0 {
		r.InCall = now.Sub(c.base.Add(time.Duration(start)))
	}
	if t.sched.nextCall().Equal(next) {
		r.NextCall = next
	}
	return r
}

// Alive is a liveness check for /livez: it returns an error only when the
// tracker itself is stuck — a store call has been in flight for more than
// twice the call timeout (Duration/4), so the Store ignores its ctx. A
// failing or slow store, or another holder leading, leaves Alive nil (use
// Check or Report for readiness). After Close, Alive returns nil.
func (t *Tracker) Alive() error {
	start := t.counters.callStart.Load()
	if start == 0 {
		return nil
	}
	in := t.cfg.Clock.Now().Sub(t.counters.base.Add(time.Duration(start)))
	if in <= 2*t.cfg.callTimeout() {
		return nil
	}
	return fmt.Errorf("lease %q: tracker stuck: a store call has not returned for %v "+
		"(call timeout %v): the Store does not end calls when their context does",
		t.cfg.Name, in, t.cfg.callTimeout())
}

// counters are the Report's counters: written by the renewer, read by
// Report and Alive with atomic loads.
type counters struct {
	// base is one nanosecond before NewTracker: lastEnd and callStart are
	// positive offsets from it, 0 when none.
	base time.Time

	calls                                    leasestore.Counters
	transitions, handOvers                   atomic.Uint64
	unknownNanos, lastLatency, handOverNanos atomic.Int64
	lastEnd, callStart                       atomic.Int64
	late                                     [lateCauses]atomic.Uint64 // late renewals by cause
}
