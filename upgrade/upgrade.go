package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// Phase is where a server is in its upgrade.
type Phase int

// The phases. The zero Phase is "unknown": no gate is ever in it, and a
// client decodes a phase it does not know to it.
const (
	// PhaseChecking: the agent is finding out whether it needs new agent
	// binaries. Gates start here.
	PhaseChecking Phase = iota + 1
	// PhaseRunningSteps: upgrade steps are running.
	PhaseRunningSteps
	// PhaseComplete: the full API is served.
	PhaseComplete
	// PhaseFailed: the upgrade failed; calls are refused with ErrUpgradeFailed
	// until Enter starts a new attempt.
	PhaseFailed
	// PhaseDraining: the server is stopping (Drain): new calls
	// are refused as while upgrading, calls in flight finish. A gate that
	// drains stays draining.
	PhaseDraining
)

var phaseNames = [...]string{"unknown", "checking", "running-steps", "complete", "failed", "draining"}

// String returns the phase's wire name: "checking", "running-steps",
// "complete", "failed", "draining" ("unknown" for the zero Phase).
func (p Phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// describe is the phrase used in messages, for operators (DESIGN.md).
func (p Phase) describe() string {
	switch p {
	case PhaseChecking:
		return "checking whether new agent binaries are needed"
	case PhaseRunningSteps:
		return "running upgrade steps"
	case PhaseComplete:
		return "complete"
	case PhaseFailed:
		return "failed"
	case PhaseDraining:
		return "draining before a restart"
	}
	return "phase " + p.String()
}

// MarshalText returns the phase's wire name (see String).
func (p Phase) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a wire name back. A name this client does not know
// (a newer server's) sets the zero Phase and returns an error matching
// errors.NotValid, which decoders of a refusal ignore.
func (p *Phase) UnmarshalText(text []byte) error {
	*p = parsePhase(string(text))
	if *p == 0 {
		return jujuerrors.NotValidf("phase %.32q (must be checking, running-steps, complete, failed or draining)", text)
	}
	return nil
}

func parsePhase(s string) Phase {
	for i, n := range phaseNames {
		if i > 0 && n == s {
			return Phase(i)
		}
	}
	return 0
}

const defaultRetryAfter = time.Second

var errDraining = errors.New("upgrade: the gate is draining, for good")

// Report is a snapshot of a Gate, for status pages and logs.
type Report struct {
	// Phase is the current phase.
	Phase Phase
	// Since is when the gate entered Phase (on the gate's clock).
	Since time.Time
	// Epoch counts upgrade attempts: 1 for the gate's first, and one more
	// each time Enter leaves PhaseComplete or PhaseFailed.
	Epoch uint64
	// LastErr is the cause of the most recent Fail, kept across epochs; nil
	// if none.
	LastErr error
	// Calls counts the calls the gate decided while it refused, since
	// NewGate: one entry per refusing phase (checking, running-steps,
	// failed, draining). Readiness probes (ReadyHandler) are not counted.
	Calls []CallsReport
}

// CallsReport counts the calls a gate decided (Admit) in one phase.
type CallsReport struct {
	// Phase is PhaseChecking, PhaseRunningSteps, PhaseFailed or
	// PhaseDraining.
	Phase Phase
	// Admitted counts allowlisted calls, served while the gate refused others.
	Admitted uint64
	// Refused counts calls refused and not executed (503 or 409; gRPC
	// Unavailable or FailedPrecondition).
	Refused uint64
}

var refusingPhases = [...]Phase{PhaseChecking, PhaseRunningSteps, PhaseFailed, PhaseDraining}

// phaseCalls are the counters of one refusing phase.
type phaseCalls struct {
	admitted, refused atomic.Uint64
}

// GateConfig configures a Gate. The zero GateConfig is valid: the wall
// clock, no logs, no hook.
type GateConfig struct {
	// Clock stamps Report.Since and times how long each phase lasted. nil
	// means clock.WallClock.
	Clock clock.Clock
	// Logger receives one record per phase change, and nothing else. nil
	// means no logs.
	Logger *slog.Logger
	// OnTransition, if not nil, is called after every phase change (after
	// its record); err is the cause when to is PhaseFailed, else nil. Hooks
	// run in transition order, outside the gate's lock, on the goroutine of
	// one of the callers that changed the phase; by the time every such call
	// has returned, every hook has run. A hook may call the gate's methods,
	// including transitions, which are queued behind it.
	OnTransition func(from, to Phase, err error)
	// PeerReady, if not nil, says whether a ready peer can serve in this
	// server's place. It is asked once, when draining begins (Drain), and
	// each drain refusal carries its answer (InProgressError.PeerReady).
	PeerReady func() bool
}

const (
	msgPhase = "upgrade phase changed"
	keyPhase = "phase"
)

// Gate is an upgrade-in-progress gate: while it is not PhaseComplete, servers
// refuse every call that is not on their allowlist (Admit, Middleware). A
// gate starts in PhaseChecking, epoch 1. Enter moves between
// PhaseChecking and PhaseRunningSteps; Complete and Fail end the epoch, and
// whichever comes first wins until Enter starts a new epoch. Reading the
// gate is one atomic load, deciding a call one atomic add while it refuses.
// A gate holds no timer and no goroutine. A Gate is safe for concurrent use.
type Gate struct {
	clk    clock.Clock
	logger *slog.Logger                    // nil: no logs
	hook   func(from, to Phase, err error) // nil: no hook
	st     atomic.Pointer[state]           // the published state; replaced, never mutated
	calls  [PhaseDraining + 1]phaseCalls   // by phase; only the refusing phases' are used
	peer   func() bool                     // GateConfig.PeerReady
	// group is the Group whose Wait runs the epoch's steps, for Detail;
	// nil when none.
	group atomic.Pointer[Group]

	mu         sync.Mutex // serialises transitions; guards the fields below
	retryAfter time.Duration
	peerReady  bool         // PeerReady's answer when draining began
	pending    []transition // transitions whose record and hook have not run yet, in order
	delivering bool         // some goroutine is running hooks from pending
}

// state is one immutable snapshot of the gate, precomputed for the guards.
type state struct {
	Report
	guard   error       // what Admit refuses with
	refusal *refusal    // the HTTP answer to a refused request; nil when PhaseComplete
	calls   *phaseCalls // the counters of the phase; nil when PhaseComplete
	// completed and failed: shared by an epoch's states; only a closed one
	// is replaced in the next epoch (DESIGN.md, "The Completed/Failed pair").
	completed, failed chan struct{}
}

type transition struct {
	from, to Phase
	err      error
	epoch    uint64
	lasted   time.Duration // how long the gate was in from
}

// NewGate returns a gate in PhaseChecking, epoch 1, asking refused callers to
// wait 1 s (see SetRetryAfter).
func NewGate(cfg GateConfig) *Gate {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.WallClock
	}
	g := &Gate{clk: clk, logger: cfg.Logger, hook: cfg.OnTransition, peer: cfg.PeerReady, retryAfter: defaultRetryAfter}
	g.st.Store(g.newState(Report{Phase: PhaseChecking, Since: clk.Now(), Epoch: 1}, nil))
	return g
}

// Drain mirrors startup at the stop: it waits for drain to close (a
// board's Draining(); nil means at once), then for grace on the gate's
// clock, so that load balancers see readiness fall first while calls are
// still served, and enters PhaseDraining for good: every new call off the
// allowlist is refused as while upgrading (over HTTP with Connection:
// close), calls in flight finish. It returns nil once draining (at once
// if already), or, with nothing changed, ctx's error if ctx ends first
// and a NotValid error (github.com/juju/errors) for a negative grace. Run
// it beside the server: go g.Drain(ctx, board.Draining(), 5*time.Second).
func (g *Gate) Drain(ctx context.Context, drain <-chan struct{}, grace time.Duration) error {
	if grace < 0 {
		return jujuerrors.NotValidf("grace %v (must be zero or more)", grace)
	}
	if drain != nil {
		select {
		case <-drain:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := backoff.Sleep(ctx, g.clk, grace); err != nil {
		return err
	}
	peer := g.peer != nil && g.peer()
	g.mu.Lock()
	cur := g.st.Load().Report
	if cur.Phase == PhaseDraining {
		g.mu.Unlock()
		return nil
	}
	g.peerReady = peer
	g.publish(Report{Phase: PhaseDraining, Since: g.clk.Now(), Epoch: cur.Epoch, LastErr: cur.LastErr}, nil)
	g.mu.Unlock()
	g.deliver()
	return nil
}

// newState builds the snapshot for r; prev is the state it replaces (nil
// for the first).
func (g *Gate) newState(r Report, prev *state) *state {
	s := &state{Report: r}
	switch {
	case prev == nil:
		s.completed, s.failed = make(chan struct{}), make(chan struct{})
	case prev.Epoch == r.Epoch:
		s.completed, s.failed = prev.completed, prev.failed
	case prev.Phase == PhaseComplete: // a new epoch after a completed one
		s.completed, s.failed = make(chan struct{}), prev.failed
	default: // a new epoch after a failed one
		s.completed, s.failed = prev.completed, make(chan struct{})
	}
	switch r.Phase {
	case PhaseComplete:
	case PhaseFailed:
		s.guard = &FailedError{Err: r.LastErr}
	default:
		s.guard = &InProgressError{Phase: r.Phase, RetryDelay: g.retryAfter, PeerReady: r.Phase == PhaseDraining && g.peerReady}
	}
	if s.guard != nil {
		s.refusal = newRefusal(s.guard)
		s.calls = &g.calls[r.Phase]
	}
	return s
}

// admit decides a call in state s, and counts it while the gate refuses.
func (s *state) admit(allowlisted bool) error {
	switch {
	case s.guard == nil:
		return nil
	case allowlisted:
		s.calls.admitted.Add(1)
		return nil
	}
	s.calls.refused.Add(1)
	return s.guard
}

// publish installs r as the current state. g.mu is held.
func (g *Gate) publish(r Report, err error) {
	old := g.st.Load()
	s := g.newState(r, old)
	g.st.Store(s)
	if old.Phase == r.Phase { // SetRetryAfter: not a transition
		return
	}
	switch r.Phase { // the transition that ends an epoch closes its channel
	case PhaseComplete:
		close(s.completed)
	case PhaseFailed:
		close(s.failed)
	}
	if g.hook != nil || g.logger != nil {
		g.pending = append(g.pending, transition{
			from: old.Phase, to: r.Phase, err: err, epoch: r.Epoch, lasted: r.Since.Sub(old.Since),
		})
	}
}

// Enter moves the gate to p, which must be PhaseChecking or
// PhaseRunningSteps (else an error matching errors.NotValid, and no
// change). From PhaseComplete or PhaseFailed it starts a new epoch, calls
// refused again from the moment Enter returns. Entering the current phase
// is a no-op. A draining gate stays draining: Enter returns an error and
// changes nothing.
func (g *Gate) Enter(p Phase) error {
	if p != PhaseChecking && p != PhaseRunningSteps {
		return jujuerrors.NotValidf("phase %s (must be checking or running-steps: Complete and Fail end an upgrade)", p)
	}
	g.mu.Lock()
	cur := g.st.Load().Report
	if cur.Phase == p || cur.Phase == PhaseDraining {
		g.mu.Unlock()
		if cur.Phase == PhaseDraining {
			return errDraining
		}
		return nil
	}
	next := Report{Phase: p, Since: g.clk.Now(), Epoch: cur.Epoch, LastErr: cur.LastErr}
	if cur.Phase == PhaseComplete || cur.Phase == PhaseFailed {
		next.Epoch++
	}
	g.group.Store(nil)
	g.publish(next, nil)
	g.mu.Unlock()
	g.deliver()
	return nil
}

// Complete ends the current epoch successfully: every call is served. It
// is a no-op if the epoch already ended.
func (g *Gate) Complete() {
	g.end(PhaseComplete, nil)
}

// Fail ends the current epoch in failure: calls are refused with an error
// matching ErrUpgradeFailed and carrying err (nil: an unknown cause). It is
// a no-op if the epoch already ended; Enter starts a new attempt.
func (g *Gate) Fail(err error) {
	if err == nil {
		err = errors.New("cause not given")
	}
	g.end(PhaseFailed, err)
}

func (g *Gate) end(p Phase, err error) {
	g.mu.Lock()
	cur := g.st.Load().Report
	if cur.Phase == PhaseComplete || cur.Phase == PhaseFailed || cur.Phase == PhaseDraining {
		g.mu.Unlock()
		return
	}
	next := Report{Phase: p, Since: g.clk.Now(), Epoch: cur.Epoch, LastErr: cur.LastErr}
	if err != nil {
		next.LastErr = err
	}
	g.publish(next, err)
	g.mu.Unlock()
	g.deliver()
}

// Phase returns the current phase.
func (g *Gate) Phase() Phase { return g.st.Load().Phase }

// Report returns a snapshot of the gate, with its counters.
func (g *Gate) Report() Report {
	r := g.st.Load().Report
	r.Calls = make([]CallsReport, len(refusingPhases))
	for i, p := range refusingPhases {
		c := &g.calls[p]
		r.Calls[i] = CallsReport{Phase: p, Admitted: c.admitted.Load(), Refused: c.refused.Load()}
	}
	return r
}

// Completed returns a channel closed the next time an epoch completes: the
// current one, or, if it fails, the first later epoch that completes. A
// channel is replaced only once it has closed, so take it again after
// Enter to wait for the new epoch. With Failed, Cause and Detail it makes
// the gate a gate.Component, board.Follow("upgrade", g); a board entry
// resolves once, so a new epoch needs a new entry. To wait for the
// upgrade, select on Completed, Failed (then return
// &FailedError{Err: g.Cause()}) and ctx.Done().
func (g *Gate) Completed() <-chan struct{} { return g.st.Load().completed }

// Failed returns a channel closed the next time an epoch fails: the
// current one, or, if it completes, the first later epoch that fails. Like
// Completed's, a channel is replaced only once it has closed.
func (g *Gate) Failed() <-chan struct{} { return g.st.Load().failed }

// Cause returns the cause of the gate's most recent failure (Report's
// LastErr, kept across epochs), or nil if it has never failed.
func (g *Gate) Cause() error { return g.st.Load().LastErr }

// Detail says in words what the gate is waiting on while the upgrade is
// in progress ("running upgrade steps", or a Group's step "waiting for
// controller-1 to finish step 3/5 (schema-7)"), and is empty once the
// epoch ended.
func (g *Gate) Detail() string {
	switch p := g.st.Load().Phase; p {
	case PhaseComplete, PhaseFailed:
		return ""
	case PhaseRunningSteps:
		if grp := g.group.Load(); grp != nil {
			return grp.detail()
		}
		return p.describe()
	default:
		return p.describe()
	}
}

// RunSteps runs an upgrade's steps behind the gate: it enters
// PhaseRunningSteps (from PhaseComplete or PhaseFailed, in a new epoch),
// calls steps(ctx) and ends the epoch by what the steps did, not by why
// they stopped:
//
//   - steps returned nil: PhaseComplete, and RunSteps returns nil;
//   - steps failed on their own while ctx was live: Fail with the cause
//     "upgrade steps: <err>", which RunSteps returns (matching err);
//   - ctx ended (a SIGTERM mid-upgrade) and steps returned an error: the
//     gate stays in PhaseRunningSteps, and RunSteps returns an error
//     matching both ctx's error and the steps' (DESIGN.md explains why).
//
// If ctx has already ended, or the gate is draining, RunSteps returns an
// error and changes nothing.
func (g *Gate) RunSteps(ctx context.Context, steps func(context.Context) error) error {
	if steps == nil {
		return jujuerrors.NotValidf("nil steps")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("upgrade steps not started: %w", err)
	}
	if err := g.Enter(PhaseRunningSteps); err != nil {
		return err // draining
	}
	err := steps(ctx)
	switch {
	case err == nil:
		g.Complete()
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("upgrade steps stopped, upgrade still in progress: %w", err)
	case ctx.Err() != nil:
		return fmt.Errorf("upgrade steps stopped, upgrade still in progress: %w (%w)", ctx.Err(), err)
	}
	err = fmt.Errorf("upgrade steps: %w", err)
	g.Fail(err)
	return err
}

// Admit is the per-call guard: call it for every call, with allowlisted
// saying whether the call is on your allowlist, and run the call only if
// it returns nil (the upgrade is complete, or allowlisted is true).
// Otherwise it returns the refusal: an *InProgressError while the upgrade
// is in progress, a *FailedError once it failed. Never cache the answer at
// login: Enter can close the gate again at any time.
//
// While the gate refuses, each call is counted in Report().Calls. It
// allocates nothing; the errors it returns are shared and read-only.
func (g *Gate) Admit(allowlisted bool) error { return g.st.Load().admit(allowlisted) }

// SetRetryAfter sets R, how long refused callers are asked to wait at
// least (default 1 s). Admit's InProgressError carries R itself; each
// refusal on the wire carries a wait drawn from [R, 2R] (DESIGN.md, "One
// jitter"); an RPC layer of your own should draw from [R, 2R] too. d must
// be positive (clients read more than an hour as an hour). It takes effect
// at once and is not a transition.
func (g *Gate) SetRetryAfter(d time.Duration) error {
	if d <= 0 {
		return jujuerrors.NotValidf("RetryAfter %v (must be positive)", d)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.retryAfter = d
	g.publish(g.st.Load().Report, nil)
	return nil
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
		g.log(t)
		if g.hook != nil {
			g.hook(t.from, t.to, t.err)
		}
		g.mu.Lock()
	}
	g.pending = nil
	g.delivering = false
	done = true
	g.mu.Unlock()
}

// log records a phase change: INFO, or ERROR with its cause for PhaseFailed.
func (g *Gate) log(t transition) {
	if g.logger == nil {
		return
	}
	level := slog.LevelInfo
	attrs := []slog.Attr{
		slog.String(keyPhase, t.to.String()),
		slog.String("from", t.from.String()),
		slog.Duration("lasted", t.lasted),
		slog.Uint64("epoch", t.epoch),
	}
	if t.err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.Any("err", t.err))
	}
	g.logger.LogAttrs(context.Background(), level, msgPhase, attrs...)
}
