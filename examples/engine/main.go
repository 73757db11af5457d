// Command engine wires coldstart's gates into a minimal dependency engine
// (manifold-style: named inputs, start, output; restart on bounce), written
// here so that nothing imports an engine.
//
// The wiring is juju's upgrade-steps pattern: a gate manifold outputs one
// lock, the runner unlocks it when the steps are done, and a flag made from
// it keeps the API server from starting until then. When the gate opens the
// flag bounces, the engine restarts it, and the API server starts.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
)

// task is a Worker running one function; Kill cancels its context.
type task struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func startTask(fn func(ctx context.Context) error) *task {
	ctx, cancel := context.WithCancel(context.Background())
	t := &task{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.err = fn(ctx)
	}()
	return t
}

func (t *task) Kill()       { t.cancel() }
func (t *task) Wait() error { <-t.done; return t.err }

// lockWorker holds a gate for as long as the engine runs it.
type lockWorker struct {
	*task
	lock *gate.Lock
}

// checker is what a flag manifold outputs.
type checker interface{ Check() bool }

// Manifolds returns the upgrade-steps wiring. runSteps stands for the
// upgrade steps; serve for the API server.
func Manifolds(runSteps, serve func(ctx context.Context) error) map[string]Manifold {
	return map[string]Manifold{
		"upgrade-steps-gate": {
			Start: func(Getter) (Worker, error) {
				return &lockWorker{
					task: startTask(func(ctx context.Context) error { <-ctx.Done(); return nil }),
					lock: gate.New("upgrade-steps"),
				}, nil
			},
			Output: func(w Worker, out any) error { return gate.Output(w.(*lockWorker).lock, out) },
		},
		"upgrade-steps-runner": {
			Inputs: []string{"upgrade-steps-gate"},
			Start: func(get Getter) (Worker, error) {
				var done gate.Unlocker
				if err := get("upgrade-steps-gate", &done); err != nil {
					return nil, err
				}
				return startTask(func(ctx context.Context) error {
					if err := runSteps(ctx); err != nil {
						return err
					}
					done.Unlock()
					return nil
				}), nil
			},
		},
		"upgrade-steps-flag": {
			Inputs: []string{"upgrade-steps-gate"},
			Start: func(get Getter) (Worker, error) {
				var w gate.Waiter
				if err := get("upgrade-steps-gate", &w); err != nil {
					return nil, err
				}
				return gate.NewFlag(w), nil
			},
			Output: func(w Worker, out any) error {
				p, ok := out.(*checker)
				if !ok {
					return fmt.Errorf("upgrade-steps-flag outputs a checker, not %T", out)
				}
				*p = w.(*gate.Flag)
				return nil
			},
		},
		"api-server": {
			Inputs: []string{"upgrade-steps-flag"},
			Start: func(get Getter) (Worker, error) {
				var flag checker
				if err := get("upgrade-steps-flag", &flag); err != nil {
					return nil, err
				}
				if !flag.Check() {
					return nil, fmt.Errorf("upgrade steps not done: %w", ErrMissing)
				}
				return startTask(serve), nil
			},
		},
	}
}

func main() {
	start := time.Now()
	var mu sync.Mutex
	log := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%5dms  %s\n", time.Since(start).Milliseconds(), fmt.Sprintf(format, args...))
	}
	serving := make(chan struct{})
	e := NewEngine(clock.WallClock, Manifolds(
		func(ctx context.Context) error {
			select {
			case <-time.After(200 * time.Millisecond): // the upgrade steps
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		func(ctx context.Context) error {
			log("api-server: serving")
			close(serving)
			<-ctx.Done()
			return nil
		},
	), time.Second, log)
	go e.Run()
	select {
	case <-serving:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, errors.New("the API server never started"))
		os.Exit(1)
	}
	e.Stop()
	log("engine stopped")
}
