package manifold_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/juju/clock"
	"github.com/juju/worker/v4"
	"github.com/juju/worker/v4/dependency"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/manifold"
)

// quiet is an engine Logger that says nothing.
type quiet struct{}

func (quiet) Tracef(string, ...any) {}
func (quiet) Debugf(string, ...any) {}
func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}

// An agent's API server must not serve until its upgrade steps have run.
// Three calls wire that into juju's engine: the gate, its flag, and the
// API server gated on the flag. The upgrader and the API server are the
// agent's own manifolds; nothing else is written.
func Example() {
	engine, err := dependency.NewEngine(dependency.EngineConfig{
		IsFatal:     func(error) bool { return false },
		WorstError:  func(err, _ error) error { return err },
		ErrorDelay:  3 * time.Second,
		BounceDelay: 10 * time.Millisecond,
		Clock:       clock.WallClock,
		Metrics:     dependency.DefaultMetrics(),
		Logger:      quiet{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer worker.Stop(engine)

	steps := gate.New("upgrade-steps")
	serving := make(chan struct{})
	err = dependency.Install(engine, dependency.Manifolds{
		"upgrade-steps-gate": manifold.Lock(steps),
		"upgrade-steps-flag": manifold.Flag("upgrade-steps-gate"),
		"upgrader": {
			Inputs: []string{"upgrade-steps-gate"},
			Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
				var done gate.Unlocker
				if err := get.Get("upgrade-steps-gate", &done); err != nil {
					return nil, err
				}
				return runSteps(done), nil
			},
		},
		"api-server": manifold.Gated(dependency.Manifold{
			Start: func(context.Context, dependency.Getter) (worker.Worker, error) {
				fmt.Println("api-server: serving")
				close(serving)
				return newIdle(), nil
			},
		}, "upgrade-steps-flag"),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	<-serving
	fmt.Println(steps)
	// Output:
	// upgrade steps: running
	// upgrade steps: done
	// api-server: serving
	// upgrade-steps (unlocked)
}

// runSteps is the agent's upgrader: it runs the steps, then unlocks.
func runSteps(done gate.Unlocker) worker.Worker {
	w := newIdle()
	go func() {
		fmt.Println("upgrade steps: running")
		fmt.Println("upgrade steps: done")
		done.Unlock()
	}()
	return w
}

// idle is a worker that runs until killed.
type idle struct {
	kill chan struct{}
	once sync.Once
}

func newIdle() *idle        { return &idle{kill: make(chan struct{})} }
func (w *idle) Kill()       { w.once.Do(func() { close(w.kill) }) }
func (w *idle) Wait() error { <-w.kill; return nil }
