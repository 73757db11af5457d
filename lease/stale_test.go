package lease_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// watchStallClock is a testclock whose Now, called from the tracker's
// leadership watch (the goroutine that ends a Lead function's ctx), first
// runs a hook once: a stall of that goroutine, between its reading of the
// status and of the clock, during which the world moves on.
type watchStallClock struct {
	*testclock.Clock
	hook atomic.Pointer[func()]
}

func (c *watchStallClock) Now() time.Time {
	if calledFromWatch() {
		if f := c.hook.Swap(nil); f != nil {
			(*f)()
		}
	}
	return c.Clock.Now()
}

// calledFromWatch reports whether the Tracker's watch method is on the
// caller's stack.
func calledFromWatch() bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "lease.(*Tracker).watch") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestLeadIsNotEndedByAStaleStatus: the goroutine that ends a Lead
// function's ctx reads the status, then the clock. If it stalls in between
// while the renewer renews and the clock passes the old Until, the old
// status looks run out — but it is no longer the status: the lease is
// held, renewed, and fn must go on. (Judged on the stale status, fn's ctx
// ended with ErrRenewalFailed while the lease was held, and Lead ran fn
// again within the same leadership.)
func TestLeadIsNotEndedByAStaleStatus(t *testing.T) {
	clk := &watchStallClock{Clock: testclock.NewClock(t0)}
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk.Clock})
	tr, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
		Store: storeOnly{mem}, Name: "singular", Holder: "unit-0", Duration: dur, Clock: clk,
	}))
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	first, err := tr.Check(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(until0), first.Until)
	_, err = leasetest.Settle(ctx, tr, clk.Clock, 1) // waits for its renewal at t0+28.5s
	require.NoError(t, err)

	// The watch stalls at its first look, with the first status read: the
	// renewer renews at t0+28.5s and again at t0+57s, the first Until,
	// each on time, before the watch reads the clock.
	stall := func() {
		for _, at := range []time.Duration{renewAt, until0} {
			clk.Advance(t0.Add(at).Sub(clk.Clock.Now()))
			if _, err := leasetest.Settle(ctx, tr, clk.Clock, 0); err != nil {
				t.Error(err)
			}
			for st, changed := tr.Current(); !st.Until.After(t0.Add(at)); st, changed = tr.Current() {
				<-changed
			}
		}
	}
	clk.hook.Store(&stall)

	started, ended := make(chan lease.Status, 2), make(chan error, 2)
	leadCtx, stopLeading := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() {
		led <- tr.Lead(leadCtx, func(ctx context.Context, st lease.Status) error {
			started <- st
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return nil
		})
	}()
	require.Equal(t, first.Token, (<-started).Token)
	// Once the watch has looked again, it waits: the renewer's alarm and
	// the watch's own (a watch that ended fn has none; Lead then runs fn
	// again, and its watch arms one, after fn said so on ended).
	require.NoError(t, clk.WaitAdvance(0, wait, 2))
	require.Nil(t, clk.hook.Load(), "the watch stalled")
	select {
	case err := <-ended:
		t.Fatalf("fn's ctx ended while the lease was held and renewed: %v", err)
	default:
	}
	st, err := tr.Check(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, first.Token, st.Token, "the same term, renewed")
	stopLeading()
	require.ErrorIs(t, <-led, context.Canceled)
	require.ErrorIs(t, <-ended, context.Canceled, "fn's ctx ended when Lead's did, and only then")
}
