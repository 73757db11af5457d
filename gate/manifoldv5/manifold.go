package manifoldv5

import (
	"context"
	"fmt"
	"slices"

	"github.com/juju/clock"
	"github.com/juju/worker/v5"
	"github.com/juju/worker/v5/dependency"

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
func (c Config) Lock(l *gate.Lock) dependency.Manifold {
	if l == nil {
		panic("manifoldv5.Lock: nil *gate.Lock")
	}
	return dependency.Manifold{
		Start: func(context.Context, dependency.Getter) (worker.Worker, error) {
			return &lockWorker{enginegate.NewLock(l, c.Clock, dependency.ErrMissing)}, nil
		},
		Output: lockOutput,
	}
}

// Lock is Config{}.Lock(l): its report is stamped on the wall clock.
func Lock(l *gate.Lock) dependency.Manifold { return Config{}.Lock(l) }

// lockWorker and flagWorker are the shared workers in v5's method set,
// whose Report takes a context (the report is in memory: it never blocks).
type (
	lockWorker struct{ *enginegate.Lock }
	flagWorker struct{ *enginegate.Flag }
)

// Report is the worker's report (dependency.Reporter).
func (w *lockWorker) Report(context.Context) map[string]any { return w.Lock.Report() }

// Report is the worker's report (dependency.Reporter).
func (f *flagWorker) Report(context.Context) map[string]any { return f.Flag.Report() }

func lockOutput(in worker.Worker, out any) error {
	w, ok := in.(*lockWorker)
	if !ok {
		return fmt.Errorf("manifoldv5.Lock: want a gate lock worker, got %T", in)
	}
	return w.Output(out)
}

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
func Flag(lockName string) dependency.Manifold {
	return dependency.Manifold{
		Inputs: []string{lockName},
		Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
			var lock *enginegate.Lock
			if err := get.Get(lockName, &lock); err != nil {
				return nil, err
			}
			f, err := enginegate.StartFlag(lock)
			if err != nil {
				return nil, err
			}
			return &flagWorker{f}, nil
		},
		Output: flagOutput,
		Filter: func(err error) error { return enginegate.Bounce(err, dependency.ErrBounce) },
	}
}

func flagOutput(in worker.Worker, out any) error {
	f, ok := in.(*flagWorker)
	if !ok {
		return fmt.Errorf("manifoldv5.Flag: want a gate flag worker, got %T", in)
	}
	return f.Output(out)
}

// checker is what Gated asks a flag for: juju's engine.Flag.
type checker interface{ Check() bool }

// Gated returns m changed to start only while every named flag manifold's
// Check() is true — juju's "housing" of a manifold behind flags. The flags
// become inputs of m, so the engine restarts m whenever one of them
// bounces; while any is false, or not running, m's Start is not called and
// the engine sees dependency.ErrMissing (naming the flag in its report). m's
// Output and Filter are kept. A flag is any manifold whose Output hands out
// a Check() bool, such as Flag's.
func Gated(m dependency.Manifold, flags ...string) dependency.Manifold {
	start := m.Start
	inputs := slices.Clone(m.Inputs)
	for _, name := range flags {
		if !slices.Contains(inputs, name) {
			inputs = append(inputs, name)
		}
	}
	flags = slices.Clone(flags)
	m.Inputs = inputs
	m.Start = func(ctx context.Context, get dependency.Getter) (worker.Worker, error) {
		for _, name := range flags {
			var flag checker
			if err := get.Get(name, &flag); err != nil {
				return nil, err
			}
			if !flag.Check() {
				return nil, fmt.Errorf("flag %q is not set: %w", name, dependency.ErrMissing)
			}
		}
		return start(ctx, get)
	}
	return m
}
