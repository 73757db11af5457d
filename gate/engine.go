package gate

import (
	"fmt"
	"reflect"
	"sync"
)

// Flag is a gate seen as a dependency engine's worker (juju's
// worker.Worker and engine.Flag), without importing one: Check is fixed
// when it is made, and a flag made on a locked gate ends with ErrUnlocked
// once the gate opens, or with the gate's error if it fails, so the
// engine restarts it and its dependents (juju's "bounce": gate/manifold
// maps ErrUnlocked to dependency.ErrBounce). Flag needs no goroutine.
type Flag struct {
	w     Waiter
	open  bool
	kill  chan struct{}
	once  sync.Once
	fails failer // nil if w cannot fail

	mu    sync.Mutex
	ended bool  // Wait has returned at least once
	err   error // what the first Wait returned
}

// NewFlag returns a flag whose Check reports whether w is unlocked now.
func NewFlag(w Waiter) *Flag {
	if w == nil {
		panic("gate.NewFlag: nil Waiter")
	}
	f := &Flag{w: w, open: w.IsUnlocked(), kill: make(chan struct{})}
	f.fails, _ = w.(failer)
	return f
}

// Check reports whether the gate was unlocked when the flag was made.
func (f *Flag) Check() bool { return f.open }

// Kill asks the flag to stop; Wait then returns nil. It is idempotent.
func (f *Flag) Kill() { f.once.Do(func() { close(f.kill) }) }

// Wait blocks until the flag is killed (returning nil) or, for a flag made
// on a locked gate, until the gate opens (returning ErrUnlocked) or fails
// (returning its error). Every call returns what the first one returned,
// as a juju worker's Wait does, even when the gate opened and the flag was
// killed before the first call.
func (f *Flag) Wait() error {
	err := f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended, f.err = true, err
	}
	return f.err
}

func (f *Flag) wait() error {
	if f.open {
		<-f.kill
		return nil
	}
	var failed <-chan struct{}
	if f.fails != nil {
		failed = f.fails.Done()
	}
	select {
	case <-f.kill:
		return nil
	case <-f.w.Unlocked():
		return ErrUnlocked
	case <-failed:
		if err := outcome(f.w, f.fails); err != nil {
			return err
		}
		return ErrUnlocked
	}
}

// Output assigns l to *out, for a dependency engine's output step: out must
// be a non-nil pointer to an interface that *Lock satisfies — *gate.Waiter,
// *gate.Unlocker, or an engine's own interface type with the same methods —
// or a **gate.Lock. Anything else is an error naming the type, and so is a
// nil l. An engine's output func finds the worker's *Lock and calls Output.
func Output(l *Lock, out any) error {
	if l == nil {
		return fmt.Errorf("gate.Output: nil *gate.Lock into %T", out)
	}
	switch o := out.(type) {
	case *Waiter:
		if o != nil {
			*o = l
			return nil
		}
	case *Unlocker:
		if o != nil {
			*o = l
			return nil
		}
	case **Lock:
		if o != nil {
			*o = l
			return nil
		}
	}
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Interface ||
		!reflect.TypeOf(l).Implements(v.Elem().Type()) {
		return fmt.Errorf("gate.Output: cannot output gate %q into %T: want *gate.Waiter, *gate.Unlocker, **gate.Lock or a pointer to an interface *gate.Lock implements", l.Name(), out)
	}
	v.Elem().Set(reflect.ValueOf(l))
	return nil
}
