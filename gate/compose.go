package gate

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// AllOf returns a gate that unlocks once every part has unlocked, and fails
// as soon as any part fails (with an error that matches that part's cause).
// AllOf with no parts is unlocked at once. A *Lock part is followed
// without a goroutine, any other Waiter by one that ends when that part
// unlocks or the composite resolves. A nil part panics. The composite
// records its *Lock parts as what it waits for (see Lock.After).
func AllOf(name string, parts ...Waiter) *Lock {
	all := composite("AllOf", name, parts)
	if len(parts) == 0 {
		all.Unlock()
		return all
	}
	var remaining atomic.Int64
	remaining.Store(int64(len(parts)))
	for _, p := range parts {
		follow(all, p, func(err error) {
			if err != nil {
				all.Fail(err)
			} else if remaining.Add(-1) == 0 {
				all.Unlock()
			}
		})
	}
	return all
}

// AnyOf returns a gate that unlocks as soon as any part unlocks, and fails
// only once every part has failed (with an error that matches every part's
// cause). AnyOf with no parts can never unlock, so it fails at once.
//
// Parts are followed as by AllOf; a nil part panics.
func AnyOf(name string, parts ...Waiter) *Lock {
	anyGate := composite("AnyOf", name, parts)
	if len(parts) == 0 {
		anyGate.Fail(errNoParts)
		return anyGate
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	for _, p := range parts {
		follow(anyGate, p, func(err error) {
			if err == nil {
				anyGate.Unlock()
				return
			}
			mu.Lock()
			errs = append(errs, err)
			all := len(errs) == len(parts)
			mu.Unlock()
			if all {
				anyGate.Fail(errors.Join(errs...))
			}
		})
	}
	return anyGate
}

// composite returns the gate fn makes, recording its *Lock parts as what
// it waits for (a Board's timeline cannot place another Waiter); a nil
// part panics.
func composite(fn, name string, parts []Waiter) *Lock {
	c := New(name)
	for i, p := range parts {
		l, isLock := p.(*Lock)
		if p == nil || (isLock && l == nil) {
			panic(fmt.Sprintf("gate.%s(%q): part %d is nil", fn, name, i))
		}
		if isLock {
			c.after = append(c.after, l)
		}
	}
	return c
}

// follow calls f once with nil when part unlocks or with its error when it
// fails, unless the composite resolves first.
func follow(composite *Lock, part Waiter, f func(err error)) {
	if part.IsUnlocked() {
		f(nil)
		return
	}
	if l, ok := part.(*Lock); ok {
		l.onResolve(func() { f(l.Err()) })
		return
	}
	if fl, ok := part.(failer); ok {
		go func() {
			select {
			case <-fl.Done():
				f(outcome(part, fl))
			case <-composite.Done():
			}
		}()
		return
	}
	go func() {
		select {
		case <-part.Unlocked():
			f(nil)
		case <-composite.Done():
		}
	}()
}
