package manifold

import (
	"github.com/juju/clock"
	"github.com/juju/worker/v4"
	"github.com/juju/worker/v4/dependency"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/internal/enginegate"
)

// Config holds what the Lock manifolds it makes share. The zero Config is
// ready to use, as net.ListenConfig's is.
type Config struct {
	// Clock stamps "since" in the workers' reports: juju agents pass the
	// clock they give the engine. nil means clock.WallClock.
	Clock clock.Clock
}

// Lock returns a manifold with no inputs whose worker holds l until it is
// killed. Its output hands l to dependents as any type gate.Output
// supports: *gate.Lock, gate.Waiter, gate.Unlocker, or an interface the
// dependent declares with the same methods (juju's worker/gate Waiter and
// Unlocker).
//
// The worker is a dependency.Reporter: the engine's report (what
// juju_engine_report shows) holds, under the manifold's "report",
//
//	gate: upgrade-steps
//	state: failed                  # locked, unlocked or failed
//	since: "2026-11-30 01:00:03"   # when the worker saw it enter that state
//	error: "step 3: schema migration failed"   # the cause, once failed
//
// since is on c.Clock, in the layout of the engine's own "started".
func (c Config) Lock(l *gate.Lock) dependency.Manifold { return copyOf(engine.Lock(l, c.Clock)) }

// Lock is Config{}.Lock(l): its report is stamped on the wall clock.
func Lock(l *gate.Lock) dependency.Manifold { return Config{}.Lock(l) }

// Flag returns a manifold whose worker is a *gate.Flag on the gate held by
// the Lock manifold named lockName (its only input). Its output hands the
// flag out as *gate.Flag or any interface the flag satisfies — juju's
// engine.Flag (Check() bool) among them — for Gated or for a dependent's
// own check. When the gate opens the flag ends and its Filter turns that
// into dependency.ErrBounce: the engine starts it again at once, now with
// Check() true, and restarts its dependents. Its report is the lock's plus
// "check", the value it was started with.
//
// When the gate fails, the first flag to see it ends with the failure (one
// ERROR log from the engine, naming the gate and the cause, however many
// flags the gate has) and, started again after the engine's ErrorDelay,
// stops for good with an error that keeps the cause in the engine's report
// and that the engine treats as a missing dependency: no further restart,
// no further ERROR, and no manifold gated on the flag ever starts. The rest
// of the engine runs on.
func Flag(lockName string) dependency.Manifold { return copyOf(engine.Flag(lockName)) }

// Gated returns m changed to start only while every named flag manifold's
// Check() is true — juju's "housing" of a manifold behind flags. The flags
// become inputs of m, so the engine restarts m whenever one of them
// bounces; while any is false, or not running, m's Start is not called and
// the engine sees dependency.ErrMissing (naming the flag in its report). m's
// Output and Filter are kept. A flag is any manifold whose Output hands out
// a Check() bool, such as Flag's.
func Gated(m dependency.Manifold, flags ...string) dependency.Manifold {
	m.Inputs, m.Start = engine.Gated(m.Inputs, m.Start, flags...)
	return m
}

// engine is juju/worker/v4's engine, whose workers report without a
// context: the shared workers are its workers as they are.
var engine = enginegate.Engine[dependency.Getter, worker.Worker]{
	Pkg:     "manifold",
	Missing: dependency.ErrMissing,
	Bounce:  dependency.ErrBounce,
	Wrap:    func(w enginegate.Worker) worker.Worker { return w },
	Unwrap: func(w worker.Worker) enginegate.Worker {
		ew, _ := w.(enginegate.Worker)
		return ew
	},
}

func copyOf(m enginegate.Manifold[dependency.Getter, worker.Worker]) dependency.Manifold {
	return dependency.Manifold{Inputs: m.Inputs, Start: m.Start, Output: m.Output, Filter: m.Filter}
}
