package manifoldv5

import (
	"context"

	"github.com/juju/clock"
	"github.com/juju/worker/v5"
	"github.com/juju/worker/v5/dependency"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/internal/enginegate"
)

// Config is gate/manifold's Config: what the Lock manifolds it makes
// share. The zero Config is ready to use.
type Config struct {
	// Clock stamps "since" in the workers' reports: juju agents pass the
	// clock they give the engine. nil means clock.WallClock.
	Clock clock.Clock
}

// Lock is gate/manifold's Config.Lock, for juju/worker/v5: a manifold
// with no inputs whose worker holds l until it is killed, hands it out as
// gate.Output does, and reports the gate, its state, since when (on
// c.Clock) and a failure's cause.
func (c Config) Lock(l *gate.Lock) dependency.Manifold { return copyOf(engine.Lock(l, c.Clock)) }

// Lock is Config{}.Lock(l): its report is stamped on the wall clock.
func Lock(l *gate.Lock) dependency.Manifold { return Config{}.Lock(l) }

// Flag is gate/manifold's Flag, for juju/worker/v5: a manifold whose
// worker is a *gate.Flag on the gate held by the Lock manifold named
// lockName, bounced (dependency.ErrBounce) when the gate opens; a failed
// gate is one ERROR, then a missing dependency that keeps the cause in the
// engine's report, and the manifolds gated on the flag never start.
func Flag(lockName string) dependency.Manifold { return copyOf(engine.Flag(lockName)) }

// Gated is gate/manifold's Gated, for juju/worker/v5: m, started only
// while every named flag manifold's Check() is true (the flags become
// inputs of m; otherwise the engine sees dependency.ErrMissing). m's
// Output and Filter are kept.
func Gated(m dependency.Manifold, flags ...string) dependency.Manifold {
	m.Inputs, m.Start = engine.Gated(m.Inputs, m.Start, flags...)
	return m
}

// engine is juju/worker/v5's engine, whose workers' Report takes a
// context: the shared workers are wrapped in reporter.
var engine = enginegate.Engine[dependency.Getter, worker.Worker]{
	Pkg:     "manifoldv5",
	Missing: dependency.ErrMissing,
	Bounce:  dependency.ErrBounce,
	Wrap:    func(w enginegate.Worker) worker.Worker { return reporter{w} },
	Unwrap: func(w worker.Worker) enginegate.Worker {
		r, _ := w.(reporter)
		return r.Worker
	},
}

// reporter is a shared worker in v5's method set.
type reporter struct{ enginegate.Worker }

// Report is the worker's report (dependency.Reporter). It is in memory: it
// never blocks.
func (r reporter) Report(context.Context) map[string]any { return r.Worker.Report() }

func copyOf(m enginegate.Manifold[dependency.Getter, worker.Worker]) dependency.Manifold {
	return dependency.Manifold{Inputs: m.Inputs, Start: m.Start, Output: m.Output, Filter: m.Filter}
}
