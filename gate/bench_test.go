package gate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/coldstart-go/coldstart/gate"
)

// closedChan is the baseline: the cheapest possible open gate.
type closedChan chan struct{}

func (c closedChan) Unlocked() <-chan struct{} { return c }
func (c closedChan) IsUnlocked() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func openChan() closedChan {
	c := make(closedChan)
	close(c)
	return c
}

func openLock() *gate.Lock {
	l := gate.New("open")
	l.Unlock()
	return l
}

var sink bool

func BenchmarkIsUnlocked(b *testing.B) {
	b.Run("bare-chan", func(b *testing.B) {
		var w gate.Waiter = openChan()
		b.ReportAllocs()
		for b.Loop() {
			sink = w.IsUnlocked()
		}
	})
	b.Run("lock", func(b *testing.B) {
		var w gate.Waiter = openLock()
		b.ReportAllocs()
		for b.Loop() {
			sink = w.IsUnlocked()
		}
	})
}

func BenchmarkWaitOpen(b *testing.B) {
	ctx := context.Background()
	b.Run("bare-chan", func(b *testing.B) {
		c := openChan()
		b.ReportAllocs()
		for b.Loop() {
			select {
			case <-c:
			case <-ctx.Done():
			}
		}
	})
	b.Run("lock", func(b *testing.B) {
		l := openLock()
		b.ReportAllocs()
		for b.Loop() {
			if err := gate.Wait(ctx, l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWake10k measures one Unlock releasing 10,000 blocked waiters: the
// time from Unlock to the last waiter returning.
func BenchmarkWake10k(b *testing.B) {
	const n = 10000
	run := func(b *testing.B, block func() (wait func(), open func())) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			wait, open := block()
			var started, done sync.WaitGroup
			started.Add(n)
			done.Add(n)
			for range n {
				go func() { started.Done(); wait(); done.Done() }()
			}
			started.Wait()
			b.StartTimer()
			open()
			done.Wait()
		}
	}
	b.Run("bare-chan", func(b *testing.B) {
		run(b, func() (func(), func()) {
			c := make(chan struct{})
			return func() { <-c }, func() { close(c) }
		})
	})
	b.Run("lock", func(b *testing.B) {
		run(b, func() (func(), func()) {
			l := gate.New("herd")
			return func() { _ = gate.Wait(context.Background(), l) }, l.Unlock
		})
	})
}
