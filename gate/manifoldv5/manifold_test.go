package manifoldv5_test

import (
	"context"
	"testing"
	"time"

	"github.com/juju/clock"
	"github.com/juju/worker/v5"
	"github.com/juju/worker/v5/dependency"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/internal/enginetest"
	"github.com/coldstart-go/coldstart/gate/manifoldv5"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The adapter's promises, checked by the kit both adapters run, in a real
// juju/worker/v5 engine.
func TestManifolds(t *testing.T) {
	enginetest.Run(t, enginetest.Adapter[dependency.Manifold]{
		Pkg:   "manifoldv5",
		Lock:  manifoldv5.Lock,
		Flag:  manifoldv5.Flag,
		Gated: manifoldv5.Gated,
		LockOn: func(clk clock.Clock, l *gate.Lock) dependency.Manifold {
			return manifoldv5.Config{Clock: clk}.Lock(l)
		},
		Manifold:     userManifold,
		Inputs:       func(m dependency.Manifold) []string { return m.Inputs },
		Filter:       func(m dependency.Manifold) func(error) error { return m.Filter },
		ErrUninstall: dependency.ErrUninstall,
		NewEngine: func(clk clock.Clock, errorDelay time.Duration, rec *enginetest.Recorder) (enginetest.Engine[dependency.Manifold], error) {
			e, err := dependency.NewEngine(dependency.EngineConfig{
				IsFatal:    func(error) bool { return false },
				WorstError: func(err, _ error) error { return err },
				ErrorDelay: errorDelay,
				Clock:      clk,
				Metrics:    rec,
				Logger:     rec,
			})
			return engine{e}, err
		},
	})
}

// userManifold is a user's manifold in v5's types.
func userManifold(m enginetest.Manifold) dependency.Manifold {
	out := dependency.Manifold{
		Inputs: m.Inputs,
		Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
			return m.Start(get.Get)
		},
		Filter: m.Filter,
	}
	if m.Output != nil {
		out.Output = func(in worker.Worker, o any) error { return m.Output(in, o) }
	}
	return out
}

type engine struct{ *dependency.Engine }

func (e engine) Install(manifolds map[string]dependency.Manifold) error {
	return dependency.Install(e.Engine, manifolds)
}

func (e engine) Report(name string) (enginetest.ManifoldReport, bool) {
	all, _ := e.Engine.Report(context.Background())[dependency.KeyManifolds].(map[string]any)
	r, ok := all[name].(map[string]any)
	return enginetest.ManifoldReport{State: r[dependency.KeyState], Error: r[dependency.KeyError], Report: r[dependency.KeyReport]}, ok
}
