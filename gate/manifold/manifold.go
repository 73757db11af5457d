package manifold

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/juju/worker/v4"
	"github.com/juju/worker/v4/dependency"

	"github.com/coldstart-go/coldstart/gate"
)

// Lock returns a manifold with no inputs whose worker holds l until it is
// killed. Its output hands l to dependents as any type gate.Output
// supports: *gate.Lock, gate.Waiter, gate.Unlocker, or an interface the
// dependent declares with the same methods (juju's worker/gate Waiter and
// Unlocker). The worker reports the gate's state in the engine's report.
func Lock(l *gate.Lock) dependency.Manifold {
	if l == nil {
		panic("manifold.Lock: nil *gate.Lock")
	}
	return dependency.Manifold{
		Start: func(context.Context, dependency.Getter) (worker.Worker, error) {
			return &lockWorker{lock: l, kill: make(chan struct{})}, nil
		},
		Output: lockOutput,
	}
}

// lockWorker holds a gate for as long as the engine runs it.
type lockWorker struct {
	lock *gate.Lock
	kill chan struct{}
	once sync.Once
	// logged is set once a flag on this lock has ended with the lock's
	// failure as a plain error, which the engine logs at ERROR.
	logged atomic.Bool
}

func (w *lockWorker) Kill()       { w.once.Do(func() { close(w.kill) }) }
func (w *lockWorker) Wait() error { <-w.kill; return nil }

// Report shows the gate in the engine's report (dependency.Reporter).
func (w *lockWorker) Report() map[string]any {
	r := map[string]any{"gate": w.lock.Name(), dependency.KeyState: "locked"}
	switch err := w.lock.Err(); {
	case w.lock.IsUnlocked():
		r[dependency.KeyState] = "unlocked"
	case err != nil:
		r[dependency.KeyState] = "failed"
		r[dependency.KeyError] = err.Error()
	}
	return r
}

// failure is what a flag on this lock ends with when the lock has failed:
// the failure itself the first time, so that the engine logs it at ERROR
// (once) and starts the flag again after its ErrorDelay; after that a
// failedGate, which the engine treats as a missing dependency — no log
// above TRACE, no restart until the lock's worker changes — while its
// report keeps the cause.
func (w *lockWorker) failure(err error) error {
	if w.logged.CompareAndSwap(false, true) {
		return err
	}
	return &failedGate{err}
}

// failedGate is the settled error of a flag whose gate failed: its message
// is the gate's failure, and it matches dependency.ErrMissing, so the
// engine neither logs it at ERROR nor restarts the flag, and every manifold
// gated on the flag sees it missing.
type failedGate struct{ err error }

func (e *failedGate) Error() string        { return e.err.Error() }
func (e *failedGate) Unwrap() error        { return e.err }
func (e *failedGate) Is(target error) bool { return target == dependency.ErrMissing }

func lockOutput(in worker.Worker, out any) error {
	w, ok := in.(*lockWorker)
	if !ok {
		return fmt.Errorf("manifold.Lock: want a gate lock worker, got %T", in)
	}
	if p, ok := out.(**lockWorker); ok && p != nil {
		*p = w
		return nil
	}
	return gate.Output(w.lock, out)
}

// Flag returns a manifold whose worker is a *gate.Flag on the gate held by
// the Lock manifold named lockName (its only input). Its output hands the
// flag out as *gate.Flag or any interface the flag satisfies — juju's
// engine.Flag (Check() bool) among them — for Gated or for a dependent's
// own check. When the gate opens the flag ends and its Filter turns that
// into dependency.ErrBounce: the engine starts it again at once, now with
// Check() true, and restarts its dependents.
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
			var lock *lockWorker
			if err := get.Get(lockName, &lock); err != nil {
				return nil, err
			}
			if err := lock.lock.Err(); err != nil {
				return nil, lock.failure(err)
			}
			return &flagWorker{Flag: gate.NewFlag(lock.lock), lock: lock}, nil
		},
		Output: flagOutput,
		Filter: bounceUnlocked,
	}
}

// flagWorker is a *gate.Flag that ends with its lock's failure as
// lockWorker.failure says.
type flagWorker struct {
	*gate.Flag
	lock *lockWorker
	once sync.Once
	err  error // what Wait returns once the gate has failed
}

// Wait returns what gate.Flag's Wait does, except that a failure is passed
// through lockWorker.failure, once: every call returns the same result.
func (f *flagWorker) Wait() error {
	err := f.Flag.Wait()
	if err == nil || errors.Is(err, gate.ErrUnlocked) {
		return err
	}
	f.once.Do(func() { f.err = f.lock.failure(err) })
	return f.err
}

// bounceUnlocked is the flag's Filter: the gate's opening is a restart, not
// a fault.
func bounceUnlocked(err error) error {
	if errors.Is(err, gate.ErrUnlocked) {
		return dependency.ErrBounce
	}
	return err
}

func flagOutput(in worker.Worker, out any) error {
	f, ok := in.(*flagWorker)
	if !ok {
		return fmt.Errorf("manifold.Flag: want a gate flag worker, got %T", in)
	}
	return assign(f.Flag, out)
}

// assign sets *out to v. out is usually a pointer to an interface the
// dependent declared (juju's engine.Flag), which this module cannot name,
// so the assignment goes through reflect.
func assign(v any, out any) error {
	p := reflect.ValueOf(out)
	if p.Kind() != reflect.Pointer || p.IsNil() || !reflect.TypeOf(v).AssignableTo(p.Elem().Type()) {
		return fmt.Errorf("manifold: cannot output %T into %T: want a non-nil pointer to %T or to an interface it implements", v, out, v)
	}
	p.Elem().Set(reflect.ValueOf(v))
	return nil
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
