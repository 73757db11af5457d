package gate

import (
	"fmt"
	"reflect"
	"sync"
)

// Flag adapts a gate for a dependency engine such as juju's, without
// importing one. Its Check result is fixed when it is made; a flag made on a
// locked gate ends with ErrUnlocked once the gate opens (or with the gate's
// error if it fails), so the engine restarts it, and every worker that
// depends on it, with the new value: juju's "bounce".
//
// Flag has the method set of a juju worker (Kill, Wait) plus Check, and
// needs no goroutine.
type Flag struct {
	w     Waiter
	open  bool
	kill  chan struct{}
	once  sync.Once
	fails failer // nil if w cannot fail
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
// (returning its error).
func (f *Flag) Wait() error {
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

// Output hands l out through out, in the shape of a juju manifold's Output
// func: out must be a non-nil pointer to an interface that *Lock satisfies —
// *gate.Waiter, *gate.Unlocker, or an engine's own interface type with the
// same methods — or a **gate.Lock. Anything else is an error naming the
// type, and so is a nil l (it would fail later, in a dependent).
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
