// Package enginegate is the engine-neutral core of gate/manifold (juju
// worker/v4) and gate/manifoldv5 (v5): the lock worker, its flag, their
// reports, and how a failed gate settles. It imports no engine: each
// adapter describes its version with an Engine.
package enginegate

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
)

// Report keys. "state" is the engine's own KeyState; the others are ours.
const (
	keyGate  = "gate"
	keyState = "state"
	keySince = "since"
	keyError = "error"
	keyCheck = "check"
)

// sinceLayout is how the engine formats dependency.KeyLastStart (UTC).
const sinceLayout = "2006-01-02 15:04:05"

// Lock is the worker that holds a gate for as long as the engine runs it,
// and reports the gate's state, since when, and its cause.
type Lock struct {
	lock    *gate.Lock
	clk     clock.Clock
	missing error // the engine's ErrMissing

	kill    chan struct{}
	killed  sync.Once
	watched chan struct{} // closed when the watching goroutine ends

	// logged is set once a flag on this lock has ended with the lock's
	// failure as a plain error, which the engine logs at ERROR.
	logged atomic.Bool

	mu    sync.Mutex
	state gate.State // the state last seen
	since time.Time  // when it was first seen
}

// NewLock starts the worker for l on clk (nil means clock.WallClock).
// missing is the engine's dependency.ErrMissing. One goroutine notes the
// moment the gate resolves; it ends when the worker is killed.
func NewLock(l *gate.Lock, clk clock.Clock, missing error) *Lock {
	if clk == nil {
		clk = clock.WallClock
	}
	w := &Lock{lock: l, clk: clk, missing: missing, kill: make(chan struct{}), watched: make(chan struct{})}
	w.state, w.since = stateOf(l), clk.Now()
	go func() {
		defer close(w.watched)
		select {
		case <-l.Done():
			w.observe()
		case <-w.kill:
		}
	}()
	return w
}

// Kill asks the worker to stop.
func (w *Lock) Kill() { w.killed.Do(func() { close(w.kill) }) }

// Wait blocks until the worker is killed and its goroutine has ended.
func (w *Lock) Wait() error {
	<-w.kill
	<-w.watched
	return nil
}

func stateOf(l *gate.Lock) gate.State {
	switch {
	case l.IsUnlocked():
		return gate.StateUnlocked
	case l.Err() != nil:
		return gate.StateFailed
	}
	return gate.StateLocked
}

// observe records the gate's state if it changed, stamped now.
func (w *Lock) observe() (gate.State, time.Time) {
	st := stateOf(w.lock)
	w.mu.Lock()
	defer w.mu.Unlock()
	if st != w.state {
		w.state, w.since = st, w.clk.Now()
	}
	return w.state, w.since
}

// Report is the engine's report for the worker: gate, state, since (when
// the worker saw the gate enter its state, or started; UTC) and, once
// failed, error.
func (w *Lock) Report() map[string]any {
	st, since := w.observe()
	r := map[string]any{keyGate: w.lock.Name(), keyState: st.String(), keySince: since.UTC().Format(sinceLayout)}
	if st == gate.StateFailed {
		r[keyError] = causeOf(w.lock.Err()).Error()
	}
	return r
}

func causeOf(err error) error {
	var fe *gate.FailedError
	if errors.As(err, &fe) && fe.Err != nil {
		return fe.Err
	}
	return err
}

// Output hands the worker's gate to a dependent: into **Lock (for the
// flag's start), or as gate.Output does.
func (w *Lock) Output(out any) error {
	if p, ok := out.(**Lock); ok && p != nil {
		*p = w
		return nil
	}
	return gate.Output(w.lock, out)
}

// failure is what a flag on this lock ends with when the lock has failed:
// the failure itself the first time (one ERROR, one restart after
// ErrorDelay), then a failedGate (a missing dependency: no restart loop).
func (w *Lock) failure(err error) error {
	if w.logged.CompareAndSwap(false, true) {
		return err
	}
	return &failedGate{err: err, missing: w.missing}
}

// failedGate is the settled error of a flag whose gate failed: the gate's
// failure, matching the engine's ErrMissing.
type failedGate struct{ err, missing error }

func (e *failedGate) Error() string        { return e.err.Error() }
func (e *failedGate) Unwrap() error        { return e.err }
func (e *failedGate) Is(target error) bool { return target == e.missing }

// Flag is a *gate.Flag on a Lock worker's gate that ends with the lock's
// failure as the lock's failure method says, and reports what it checked.
type Flag struct {
	*gate.Flag
	lock *Lock
	once sync.Once
	err  error // what Wait returns once the gate has failed
}

// StartFlag is a flag manifold's start: a Flag on lock's gate, or, if the
// gate has failed, the error that settles it (see failure).
func StartFlag(lock *Lock) (*Flag, error) {
	if err := lock.lock.Err(); err != nil {
		return nil, lock.failure(err)
	}
	return &Flag{Flag: gate.NewFlag(lock.lock), lock: lock}, nil
}

// Wait returns what gate.Flag's Wait does, except that a failure is passed
// through the lock's failure, once: every call returns the same result.
func (f *Flag) Wait() error {
	err := f.Flag.Wait()
	if err == nil || errors.Is(err, gate.ErrUnlocked) {
		return err
	}
	f.once.Do(func() { f.err = f.lock.failure(err) })
	return f.err
}

// Report is the lock's report and the value the flag checked (fixed when
// the flag started; the flag bounces when the gate opens).
func (f *Flag) Report() map[string]any {
	r := f.lock.Report()
	r[keyCheck] = f.Check()
	return r
}

// Output hands the flag to a dependent: as *gate.Flag or any interface it
// satisfies (juju's engine.Flag: Check() bool), set through reflect, for
// this package cannot name the interface.
func (f *Flag) Output(out any) error {
	p := reflect.ValueOf(out)
	if p.Kind() != reflect.Pointer || p.IsNil() || !reflect.TypeOf(f.Flag).AssignableTo(p.Elem().Type()) {
		return fmt.Errorf("manifold: cannot output %T into %T: want a non-nil pointer to %T or to an interface it implements", f.Flag, out, f.Flag)
	}
	p.Elem().Set(reflect.ValueOf(f.Flag))
	return nil
}

// Bounce is a flag manifold's Filter: the gate's opening is a restart
// (the engine's ErrBounce), not a fault.
func Bounce(err, bounce error) error {
	if errors.Is(err, gate.ErrUnlocked) {
		return bounce
	}
	return err
}
