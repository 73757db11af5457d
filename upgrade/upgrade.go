package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
)

// Phase is where a server is in its upgrade.
type Phase int

// The phases. The zero Phase is "unknown": no gate is ever in it, and a
// client decodes a phase it does not know to it.
const (
	// Checking: the agent is finding out whether it needs new agent
	// binaries. Gates start here.
	Checking Phase = iota + 1
	// RunningSteps: upgrade steps are running.
	RunningSteps
	// Complete: the full API is served.
	Complete
	// Failed: the upgrade failed; calls are refused with ErrUpgradeFailed
	// until Enter starts a new attempt.
	Failed
)

var phaseNames = [...]string{"unknown", "checking", "running-steps", "complete", "failed"}

// String returns the phase's wire name: "checking", "running-steps",
// "complete", "failed" ("unknown" for the zero Phase).
func (p Phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// describe is the phrase used in messages, which must make sense to an
// operator who has never heard of phases (incident 3: "upgrade" meant two
// different things).
func (p Phase) describe() string {
	switch p {
	case Checking:
		return "checking whether new agent binaries are needed"
	case RunningSteps:
		return "running upgrade steps"
	case Complete:
		return "complete"
	case Failed:
		return "failed"
	}
	return "phase " + p.String()
}

// parsePhase maps a wire name back to its Phase; unknown names give 0.
func parsePhase(s string) Phase {
	for i, n := range phaseNames {
		if i > 0 && n == s {
			return Phase(i)
		}
	}
	return 0
}

// DefaultRetryAfter is the RetryAfter a new Gate asks refused callers to
// wait; change it with SetRetryAfter.
const DefaultRetryAfter = time.Second

// Status is a snapshot of a Gate, for status pages and logs.
type Status struct {
	// Phase is the current phase.
	Phase Phase
	// Since is when the gate entered Phase (on the gate's clock).
	Since time.Time
	// Epoch counts upgrade attempts: 1 for the gate's first, and one more
	// each time Enter leaves Complete or Failed.
	Epoch uint64
	// LastErr is the cause of the most recent Fail, kept across epochs so an
	// operator can see why the previous attempt failed; nil if none.
	LastErr error
}

// Gate is an upgrade-in-progress gate: while it is not Complete, servers
// refuse every call that is not on their allowlist, and say so in a way
// clients can recognise and wait out (Err, Middleware, Allowlist).
//
// A gate starts in Checking, epoch 1. Enter moves between Checking and
// RunningSteps; Complete and Fail end the epoch, and whichever comes first
// wins (the other is then a no-op) until Enter starts a new epoch. Reading
// the gate (Err, Phase, Status) is a single atomic load, cheap enough for
// every call. A Gate is safe for concurrent use.
type Gate struct {
	clk clock.Clock
	st  atomic.Pointer[state] // the published state; replaced, never mutated

	mu         sync.Mutex // serialises transitions; guards the fields below
	retryAfter time.Duration
	hook       func(from, to Phase, err error)
	pending    []transition // transitions whose hook has not run yet, in order
	delivering bool         // some goroutine is running hooks from pending
}

// state is one immutable snapshot of the gate. Everything a guard needs is
// precomputed here so that refusing a call costs no formatting.
type state struct {
	Status
	guard   error         // what Err returns
	refusal *refusal      // the HTTP answer to a refused request; nil when Complete
	next    chan struct{} // closed when this state is superseded
}

type transition struct {
	hook     func(from, to Phase, err error)
	from, to Phase
	err      error
}

// NewGate returns a gate in Checking, epoch 1. A nil clk means
// clock.WallClock; the clock only stamps Status.Since.
func NewGate(clk clock.Clock) *Gate {
	if clk == nil {
		clk = clock.WallClock
	}
	g := &Gate{clk: clk, retryAfter: DefaultRetryAfter}
	g.st.Store(g.newState(Status{Phase: Checking, Since: clk.Now(), Epoch: 1}))
	return g
}

// newState builds the snapshot for st, including the error and response
// every refused call will share.
func (g *Gate) newState(st Status) *state {
	s := &state{Status: st, next: make(chan struct{})}
	switch st.Phase {
	case Complete:
	case Failed:
		s.guard = &FailedError{Cause: st.LastErr}
	default:
		s.guard = &InProgressError{Phase: st.Phase, RetryAfter: g.retryAfter}
	}
	if s.guard != nil {
		s.refusal = newRefusal(s.guard)
	}
	return s
}

// publish installs st as the current state and wakes Wait. g.mu is held.
func (g *Gate) publish(st Status, err error) {
	old := g.st.Load()
	g.st.Store(g.newState(st))
	close(old.next)
	if g.hook != nil && old.Phase != st.Phase {
		g.pending = append(g.pending, transition{hook: g.hook, from: old.Phase, to: st.Phase, err: err})
	}
}

// Enter moves the gate to p, which must be Checking or RunningSteps (use
// Complete and Fail for the others: an invalid p returns an error matching
// errors.NotValid from github.com/juju/errors and changes nothing). From
// Complete or Failed it re-enters upgrade mode in a new epoch, and calls
// are refused again from the moment Enter returns. Entering the current
// phase is a no-op.
func (g *Gate) Enter(p Phase) error {
	if p != Checking && p != RunningSteps {
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: cannot Enter phase %s: Enter takes checking or running-steps; use Complete or Fail to end an upgrade", p))
	}
	g.mu.Lock()
	cur := g.st.Load().Status
	if cur.Phase == p {
		g.mu.Unlock()
		return nil
	}
	next := Status{Phase: p, Since: g.clk.Now(), Epoch: cur.Epoch, LastErr: cur.LastErr}
	if cur.Phase == Complete || cur.Phase == Failed {
		next.Epoch++
	}
	g.publish(next, nil)
	g.mu.Unlock()
	g.deliver()
	return nil
}

// Complete ends the current epoch successfully: Err returns nil and every
// call is served. It is a no-op if the epoch already ended (Complete or
// Failed).
func (g *Gate) Complete() {
	g.end(Complete, nil)
}

// Fail ends the current epoch in failure: calls are refused with an error
// matching ErrUpgradeFailed and carrying err, and Wait returns it. A nil
// err is recorded as an unknown cause. It is a no-op if the epoch already
// ended (Complete or Failed); Enter starts a new attempt.
func (g *Gate) Fail(err error) {
	if err == nil {
		err = errors.New("cause not given")
	}
	g.end(Failed, err)
}

func (g *Gate) end(p Phase, err error) {
	g.mu.Lock()
	cur := g.st.Load().Status
	if cur.Phase == Complete || cur.Phase == Failed {
		g.mu.Unlock()
		return
	}
	next := Status{Phase: p, Since: g.clk.Now(), Epoch: cur.Epoch, LastErr: cur.LastErr}
	if err != nil {
		next.LastErr = err
	}
	g.publish(next, err)
	g.mu.Unlock()
	g.deliver()
}

// Phase returns the current phase.
func (g *Gate) Phase() Phase { return g.st.Load().Phase }

// Status returns a snapshot of the gate.
func (g *Gate) Status() Status { return g.st.Load().Status }

// Err is the per-call guard: nil when the upgrade is complete, an
// *InProgressError (matching ErrUpgradeInProgress) while it is in progress,
// and a *FailedError (matching ErrUpgradeFailed, unwrapping to the cause)
// once it failed. Call it for every call that is not allowlisted — never
// cache the answer at login, since Enter can re-close the gate at any time.
// It allocates nothing; the errors it returns are shared and must be
// treated as read-only.
func (g *Gate) Err() error { return g.st.Load().guard }

// Wait blocks until the upgrade is complete (nil), has failed (an error
// matching ErrUpgradeFailed), or ctx ends (an error wrapping ctx.Err()).
func (g *Gate) Wait(ctx context.Context) error {
	for {
		s := g.st.Load()
		switch s.Phase {
		case Complete:
			return nil
		case Failed:
			return s.guard
		}
		select {
		case <-s.next:
		case <-ctx.Done():
			return fmt.Errorf("upgrade: stopped waiting while %s: %w", s.Phase.describe(), ctx.Err())
		}
	}
}

// SetRetryAfter sets how long refused callers are asked to wait (the
// InProgressError's RetryAfter; on the wire, Retry-After rounded up to
// whole seconds). d must be positive. It takes effect at once and is not a
// transition.
func (g *Gate) SetRetryAfter(d time.Duration) error {
	if d <= 0 {
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: RetryAfter %v must be positive", d))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.retryAfter = d
	g.publish(g.st.Load().Status, nil)
	return nil
}

// OnTransition sets the hook called after every phase change, for logs and
// metrics (nil removes it). err is the cause when to is Failed, else nil.
// Hooks run in transition order, outside the gate's lock, on the goroutine
// of one of the callers that changed the phase (so one caller may run the
// hook for another's transition). A hook may call the gate's methods,
// including transitions, which are queued behind it rather than deadlocking.
// Only transitions after OnTransition returns reach the new hook.
func (g *Gate) OnTransition(hook func(from, to Phase, err error)) {
	g.mu.Lock()
	g.hook = hook
	g.mu.Unlock()
}

// deliver runs queued hooks unless another goroutine already is (it will
// pick up ours, in order). g.mu is not held.
func (g *Gate) deliver() {
	g.mu.Lock()
	if g.delivering || len(g.pending) == 0 {
		g.mu.Unlock()
		return
	}
	g.delivering = true
	done := false
	defer func() {
		if !done { // a hook panicked: let the next transition deliver again
			g.mu.Lock()
			g.delivering = false
			g.mu.Unlock()
		}
	}()
	for len(g.pending) > 0 {
		t := g.pending[0]
		g.pending[0] = transition{}
		g.pending = g.pending[1:]
		g.mu.Unlock()
		t.hook(t.from, t.to, t.err)
		g.mu.Lock()
	}
	g.pending = nil
	g.delivering = false
	done = true
	g.mu.Unlock()
}
