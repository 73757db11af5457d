package main

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
)

// Worker is a running task, with the method set of a juju worker.
type Worker interface {
	Kill()
	Wait() error
}

// ErrMissing is what a manifold's Start returns when an input it needs is
// not usable yet ("dependency not available"). The engine tries again when
// another worker starts.
var ErrMissing = errors.New("dependency not available")

// Getter hands a manifold the output of one of its inputs. It is valid only
// during the Start call it was given to (it reads the engine's state).
type Getter func(name string, out any) error

// Manifold describes one worker: the inputs it needs, how to start it, and
// how to hand its output to its dependents.
type Manifold struct {
	Inputs []string
	Start  func(get Getter) (Worker, error)
	Output func(w Worker, out any) error
}

// Engine starts each manifold once its inputs run, and when a worker ends
// with an error it stops the workers that depend on it and starts it again.
// A worker that ends with gate.ErrUnlocked (a bounced flag) is restarted at
// once; one that ends with a failed gate's error (gate.ErrFailed) is not
// restarted, since that gate never opens; one that fails otherwise, after
// RestartDelay; one that ends with nil is done. It is a minimal stand-in for juju's dependency engine, written
// here to show that coldstart's gates need no import of one.
type Engine struct {
	clk          clock.Clock
	manifolds    map[string]Manifold
	names        []string // sorted, for a deterministic start order
	restartDelay time.Duration
	log          func(format string, args ...any)

	running  map[string]Worker
	stopping map[string]int  // killed workers whose exit has not arrived
	done     map[string]bool // ended with nil or a failed gate: not restarted
	exited   chan exit
	restart  chan string
	stop     chan struct{}
	stopOnce sync.Once
	finished chan struct{}
}

type exit struct {
	name string
	w    Worker
	err  error
}

// NewEngine returns an engine for manifolds; call Run to start it. A nil
// clk means clock.WallClock.
func NewEngine(clk clock.Clock, manifolds map[string]Manifold, restartDelay time.Duration, log func(string, ...any)) *Engine {
	if clk == nil {
		clk = clock.WallClock
	}
	e := &Engine{
		clk: clk, manifolds: manifolds, restartDelay: restartDelay, log: log,
		running:  map[string]Worker{},
		stopping: map[string]int{},
		done:     map[string]bool{},
		exited:   make(chan exit),
		restart:  make(chan string),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	for n := range manifolds {
		e.names = append(e.names, n)
	}
	sort.Strings(e.names)
	return e
}

// Run runs the engine until Stop; it returns once every worker has ended.
func (e *Engine) Run() {
	defer close(e.finished)
	pendingRestarts := 0
	e.startAll()
	for {
		select {
		case x := <-e.exited:
			if e.running[x.name] != x.w {
				e.stopping[x.name]-- // a worker stopDependents killed
				e.startAll()
				continue
			}
			delete(e.running, x.name)
			e.stopDependents(x.name)
			switch {
			case x.err == nil:
				e.log("%s: finished", x.name)
				e.done[x.name] = true
			case errors.Is(x.err, gate.ErrUnlocked):
				e.log("%s: bounced (%v)", x.name, x.err)
			case errors.Is(x.err, gate.ErrFailed):
				// A failed gate never opens: restarting its flag would
				// only fail again, every RestartDelay, for ever.
				var failed *gate.FailedError
				errors.As(x.err, &failed)
				e.log("%s: gate %q failed (%v): not restarted", x.name, failed.Name, failed.Err)
				e.done[x.name] = true
			default:
				e.log("%s: failed: %v; restarting in %v", x.name, x.err, e.restartDelay)
				e.done[x.name] = true // held back until the delay ends
				pendingRestarts++
				go func(name string) {
					select {
					case <-e.clk.After(e.restartDelay):
						e.restart <- name
					case <-e.stop:
						e.restart <- ""
					}
				}(x.name)
			}
			e.startAll()
		case name := <-e.restart:
			pendingRestarts--
			delete(e.done, name)
			e.startAll()
		case <-e.stop:
			for _, w := range e.running {
				w.Kill()
			}
			left := len(e.running)
			for _, n := range e.stopping {
				left += n
			}
			for ; left > 0; left-- {
				<-e.exited
			}
			for ; pendingRestarts > 0; pendingRestarts-- {
				<-e.restart
			}
			return
		}
	}
}

// Stop kills every worker and waits for Run to return. It is idempotent;
// call it only once Run has been started.
func (e *Engine) Stop() {
	e.stopOnce.Do(func() { close(e.stop) })
	<-e.finished
}

// startAll starts every manifold whose inputs run, until nothing more can start.
func (e *Engine) startAll() {
	for progress := true; progress; {
		progress = false
		for _, name := range e.names {
			if e.running[name] != nil || e.stopping[name] > 0 || e.done[name] || !e.inputsRunning(name) {
				continue
			}
			w, err := e.manifolds[name].Start(e.getter(name))
			if err != nil {
				e.log("%s: not started: %v", name, err)
				continue
			}
			e.log("%s: started", name)
			e.running[name] = w
			progress = true
			go func() { e.exited <- exit{name, w, w.Wait()} }()
		}
	}
}

func (e *Engine) inputsRunning(name string) bool {
	for _, in := range e.manifolds[name].Inputs {
		if e.running[in] == nil {
			return false
		}
	}
	return true
}

// stopDependents kills every running worker that needs name, directly or
// not. A killed worker is not started again until its exit has arrived.
func (e *Engine) stopDependents(name string) {
	for _, n := range e.names {
		if w := e.running[n]; w != nil && slices.Contains(e.manifolds[n].Inputs, name) {
			w.Kill()
			delete(e.running, n)
			e.stopping[n]++
			e.log("%s: stopping (input %s ended)", n, name)
			e.stopDependents(n)
		}
	}
}

func (e *Engine) getter(name string) Getter {
	return func(in string, out any) error {
		if !slices.Contains(e.manifolds[name].Inputs, in) {
			return fmt.Errorf("%s: %q is not a declared input", name, in)
		}
		w := e.running[in]
		if w == nil {
			return fmt.Errorf("%s: input %q: %w", name, in, ErrMissing)
		}
		output := e.manifolds[in].Output
		if output == nil {
			return fmt.Errorf("%s: input %q has no output", name, in)
		}
		return output(w, out)
	}
}
