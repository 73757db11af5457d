// Package gatetest helps unit-test startup ordering without sleeps: assert
// that a gate is still locked, that it opens within a bound, and that gates
// opened in the order a design requires (controller port before API port).
//
// # In a testing/synctest bubble
//
// The helpers work inside a testing/synctest bubble (Go 1.25+), where
// their bounds are fake time: a helper returns at the exact fake instant
// its gate resolves. Call synctest.Wait before AssertLocked or
// AssertNotOpened; make the gates, and start what opens them, inside the
// bubble; close every Board, and let every AllOf or AnyOf with a part
// that is not a *gate.Lock resolve, before the bubble's function returns.
// A Recorder starts no goroutine. gate/DESIGN.md, "synctest", tells why.
//
//	func TestStartupOrder(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			ctrl, api := gate.New("controller-port"), gate.New("api-port")
//			rec := gatetest.NewRecorder(ctrl, api)
//			go startServers(ctrl, api) // opens each port after its fake-time work
//			synctest.Wait()
//			gatetest.AssertLocked(t, api)
//			start := time.Now()
//			gatetest.AssertUnlocksWithin(t, api, time.Hour)
//			// time.Since(start) is exactly the fake time api-port took
//			rec.AssertOrder(t, "controller-port", "api-port")
//		})
//	}
package gatetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/gate"
)

// AssertLocked fails the test if w has unlocked or failed.
func AssertLocked(t testing.TB, w gate.Waiter) bool {
	t.Helper()
	if w.IsUnlocked() {
		t.Errorf("gate %s is unlocked; want it still locked", name(w))
		return false
	}
	if l, ok := w.(*gate.Lock); ok && l.Err() != nil {
		t.Errorf("gate %s failed (%v); want it still locked", name(w), l.Err())
		return false
	}
	return true
}

// AssertUnlocksWithin fails the test unless w unlocks within d, returning as
// soon as it does; d is a generous bound against hangs, not a speed
// assertion. A gate that fails instead fails the test with its error.
func AssertUnlocksWithin(t testing.TB, w gate.Waiter, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	switch err := gate.Wait(ctx, w); {
	case err == nil:
		return true
	case errors.Is(err, context.DeadlineExceeded):
		t.Errorf("gate %s is still locked after %v", name(w), d)
	default:
		t.Errorf("gate %s did not unlock: %v", name(w), err)
	}
	return false
}

// AssertFailsWithin fails the test unless the gate fails within d with an
// error matching target (any failure if target is nil).
func AssertFailsWithin(t testing.TB, l *gate.Lock, target error, d time.Duration) bool {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Errorf("gate %s neither unlocked nor failed within %v; want it failed", name(l), d)
		return false
	}
	err := l.Err()
	switch {
	case err == nil:
		t.Errorf("gate %s unlocked; want it failed", name(l))
		return false
	case target != nil && !errors.Is(err, target):
		t.Errorf("gate %s failed with %v; want an error matching %v", name(l), err, target)
		return false
	}
	return true
}

// Recorder records the order in which gates opened, exactly (on the
// unlocking goroutine). Watch each gate, under its own name (a second is a
// failed duplicate, as in gate.Board.Add), before the code can open it.
type Recorder struct {
	board *gate.Board
}

// NewRecorder returns a recorder watching locks.
func NewRecorder(locks ...*gate.Lock) *Recorder {
	r := &Recorder{board: gate.NewBoard(gate.BoardConfig{})}
	for _, l := range locks {
		r.board.Add(l.Name(), l)
	}
	return r
}

// Watch adds l to the recorder.
func (r *Recorder) Watch(l *gate.Lock) { r.board.Add(l.Name(), l) }

// Order returns the names of the watched gates that have unlocked, first
// opened first.
func (r *Recorder) Order() []string { return r.board.Report().Opened() }

// AssertOrder fails the test unless every named gate has unlocked and they
// unlocked in the order given. Other watched gates may have opened in
// between.
func (r *Recorder) AssertOrder(t testing.TB, names ...string) bool {
	t.Helper()
	order := r.Order()
	prev := -1
	for _, n := range names {
		i := slices.Index(order, n)
		if i < 0 {
			t.Errorf("gate %q has not unlocked; opened so far: %v; want order %v", n, order, names)
			return false
		}
		if i < prev {
			t.Errorf("gates opened in the order %v; want %v", order, names)
			return false
		}
		prev = i
	}
	return true
}

// AssertNotOpened fails the test if any of the named gates has unlocked.
func (r *Recorder) AssertNotOpened(t testing.TB, names ...string) bool {
	t.Helper()
	order := r.Order()
	for _, n := range names {
		if slices.Contains(order, n) {
			t.Errorf("gate %q has unlocked (opened so far: %v); want it still closed", n, order)
			return false
		}
	}
	return true
}

func name(w gate.Waiter) string {
	if l, ok := w.(*gate.Lock); ok {
		return fmt.Sprintf("%q", l.Name())
	}
	return fmt.Sprintf("%T", w)
}
