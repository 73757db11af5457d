package enginegate

import (
	"context"
	"fmt"
	"slices"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
)

// Engine is one version of juju's dependency engine as its adapter
// describes it (G and W: its dependency.Getter and worker.Worker); its
// methods are the adapter's manifolds, written once for every version.
type Engine[G Getter, W any] struct {
	// Pkg names the adapter in its panics and errors: "manifold".
	Pkg string
	// Missing and Bounce are the engine's dependency.ErrMissing and
	// dependency.ErrBounce.
	Missing, Bounce error
	// Wrap hands a worker of this package (*Lock or *Flag) to the engine
	// as a W (v5 wraps it, for its Report that takes a context); Unwrap
	// takes it back, or returns nil for a W that is not one.
	Wrap   func(Worker) W
	Unwrap func(W) Worker
}

// Getter is the engine's dependency.Getter.
type Getter interface {
	Get(name string, out any) error
}

// Worker is what Lock and Flag have in common, for Engine.Wrap.
type Worker interface {
	Kill()
	Wait() error
	Report() map[string]any
	Output(out any) error
}

// Manifold is the fields of a dependency.Manifold that every version has.
type Manifold[G Getter, W any] struct {
	Inputs []string
	Start  func(context.Context, G) (W, error)
	Output func(W, any) error
	Filter func(error) error
}

// Lock is the adapter's Config.Lock: a manifold with no inputs whose worker
// holds l, stamping "since" on clk (nil means clock.WallClock).
func (e Engine[G, W]) Lock(l *gate.Lock, clk clock.Clock) Manifold[G, W] {
	if l == nil {
		panic(e.Pkg + ".Lock: nil *gate.Lock")
	}
	return Manifold[G, W]{
		Start: func(context.Context, G) (W, error) {
			return e.Wrap(NewLock(l, clk, e.Missing)), nil
		},
		Output: func(in W, out any) error {
			w, ok := e.Unwrap(in).(*Lock)
			if !ok {
				return fmt.Errorf("%s.Lock: want a gate lock worker, got %T", e.Pkg, in)
			}
			return w.Output(out)
		},
	}
}

// Flag is the adapter's Flag: a manifold whose worker is a Flag on the
// gate held by the Lock manifold named lockName, bounced when it opens.
func (e Engine[G, W]) Flag(lockName string) Manifold[G, W] {
	return Manifold[G, W]{
		Inputs: []string{lockName},
		Start: func(_ context.Context, get G) (W, error) {
			var zero W
			var lock *Lock
			if err := get.Get(lockName, &lock); err != nil {
				return zero, err
			}
			f, err := StartFlag(lock)
			if err != nil {
				return zero, err
			}
			return e.Wrap(f), nil
		},
		Output: func(in W, out any) error {
			f, ok := e.Unwrap(in).(*Flag)
			if !ok {
				return fmt.Errorf("%s.Flag: want a gate flag worker, got %T", e.Pkg, in)
			}
			return f.Output(out)
		},
		Filter: func(err error) error { return Bounce(err, e.Bounce) },
	}
}

// checker is what Gated asks a flag for: juju's engine.Flag.
type checker interface{ Check() bool }

// Gated is the adapter's Gated: it returns a manifold's inputs with the
// flags added (once each; inputs itself is not changed), and a start that
// calls start only while every flag's Check() is true, and otherwise
// fails with the engine's ErrMissing, naming the flag.
func (e Engine[G, W]) Gated(inputs []string, start func(context.Context, G) (W, error), flags ...string) ([]string, func(context.Context, G) (W, error)) {
	inputs = slices.Clone(inputs)
	for _, name := range flags {
		if !slices.Contains(inputs, name) {
			inputs = append(inputs, name)
		}
	}
	flags = slices.Clone(flags)
	return inputs, func(ctx context.Context, get G) (W, error) {
		var zero W
		for _, name := range flags {
			var flag checker
			if err := get.Get(name, &flag); err != nil {
				return zero, err
			}
			if !flag.Check() {
				return zero, fmt.Errorf("flag %q is not set: %w", name, e.Missing)
			}
		}
		return start(ctx, get)
	}
}
