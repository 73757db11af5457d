package lease_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/juju/clock"
	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// scaledClock runs at rate times the store's clock clk, from base: the
// clock of a holder whose oscillator is off. Its timers are clk's, set to
// fire when the scaled clock reaches their time.
type scaledClock struct {
	clk  *testclock.Clock
	base time.Time
	rate float64
}

func (c *scaledClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(c.clk.Now().Sub(c.base)) * c.rate))
}

// storeDur is how long clk takes for d to pass on c (rounded up).
func (c *scaledClock) storeDur(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / c.rate))
}

// storeTime is when, on clk, c reads t.
func (c *scaledClock) storeTime(t time.Time) time.Time { return c.base.Add(c.storeDur(t.Sub(c.base))) }

func (c *scaledClock) After(d time.Duration) <-chan time.Time { return c.clk.After(c.storeDur(d)) }
func (c *scaledClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return scaledTimer{c.clk.AfterFunc(c.storeDur(d), f), c}
}
func (c *scaledClock) NewTimer(d time.Duration) clock.Timer {
	return scaledTimer{c.clk.NewTimer(c.storeDur(d)), c}
}
func (c *scaledClock) At(t time.Time) <-chan time.Time { return c.clk.At(c.storeTime(t)) }
func (c *scaledClock) AtFunc(t time.Time, f func()) clock.Alarm {
	return scaledAlarm{c.clk.AtFunc(c.storeTime(t), f), c}
}
func (c *scaledClock) NewAlarm(t time.Time) clock.Alarm {
	return scaledAlarm{c.clk.NewAlarm(c.storeTime(t)), c}
}

type scaledTimer struct {
	clock.Timer
	c *scaledClock
}

func (t scaledTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.storeDur(d)) }

type scaledAlarm struct {
	clock.Alarm
	c *scaledClock
}

func (a scaledAlarm) Reset(t time.Time) bool { return a.Alarm.Reset(a.c.storeTime(t)) }

// TestClockRateBound: a holder's promise lasts while its clock runs slower
// than the store's by less than Margin / (2×Duration) — 5 % with the
// default Margin, 10 % with Margin Duration/5 — and no longer. The holder
// (its clock at rate × the store's) claims and renews three times; then
// the store stops answering it, and at the first instant the store lets
// another tracker claim, that one is Held. The holder must not still say
// Held then, unless its clock is slower by more than the bound: just above
// it the two promises overlap, just below they do not.
func TestClockRateBound(t *testing.T) {
	const d = 10 * time.Second
	for _, margin := range []time.Duration{0, d / 5} {
		cfg := lease.Config{Duration: d, Margin: margin}
		bound := lease.RateToleranceForTest(cfg)
		want := map[time.Duration]float64{0: 0.05, d / 5: 0.1}[margin]
		require.InDelta(t, want, bound, 1e-12, "the bound the docs state")
		for _, tc := range []struct {
			slower  float64 // how much slower the holder's clock runs
			overlap bool
		}{
			{bound * 1.02, true},
			{bound * 0.98, false},
			{0, false},
			{-0.05, false}, // faster: it promises less
		} {
			t.Run(fmt.Sprintf("margin=%v/slower=%.2f%%", margin, 100*tc.slower), func(t *testing.T) {
				assert.Equal(t, tc.overlap, overlapAtTakeover(t, d, margin, 1-tc.slower))
			})
		}
	}
}

// overlapAtTakeover runs the holder at rate × the store's clock and reports
// whether it still says Held when a successor first is.
func overlapAtTakeover(t *testing.T, d, margin time.Duration, rate float64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	clk := testclock.NewClock(t0)
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	store := leasetest.NewFaultStore(storeOnly{mem}, leasetest.FaultStoreConfig{Clock: clk})
	sc := &scaledClock{clk: clk, base: t0, rate: rate}
	holder, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: d, Margin: margin, Clock: sc,
	}))
	require.NoError(t, err)
	defer holder.Close()
	st, err := holder.Check(ctx, 0)
	require.NoError(t, err)
	for range 3 {
		_, changed := holder.Current()
		require.NoError(t, clk.WaitAdvance(0, wait, 1), "the renewer waits")
		next := holder.Report().NextCall // on the holder's clock
		require.NoError(t, clk.WaitAdvance(sc.storeTime(next).Sub(clk.Now()), wait, 1))
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no renewal")
		}
		renewed, err := holder.Check(ctx, 0)
		require.NoError(t, err)
		require.Greater(t, renewed.Until, st.Until, "renewed")
		st = renewed
	}
	// The store stops answering the holder. The term it granted at the
	// last renewal, made at this instant on its clock, ends 2×Duration on.
	// The clock goes there through each of the holder's retries, each at
	// its time: the holder is not paused, so no stopped clock may hide an
	// overlap.
	store.Always(leasetest.OpExtend, leasetest.Timeout)
	end := clk.Now().Add(2 * d)
	for calls := finishedCalls(holder.Report()); ; calls++ {
		r := settledScaled(ctx, t, holder, clk, sc, calls)
		next := sc.storeTime(r.NextCall)
		if !next.Before(end) {
			break
		}
		clk.Advance(next.Sub(clk.Now()))
	}
	clk.Advance(end.Sub(clk.Now()))

	successor, err := lease.NewTracker(lease.Config{
		Store: mem, Name: "singular", Holder: "unit-1", Duration: d, Margin: margin, Clock: clk,
	})
	require.NoError(t, err)
	defer successor.Close()
	next, err := successor.Check(ctx, 0)
	require.NoError(t, err, "the store lets a successor claim at the term's end")
	require.Equal(t, lease.Held, next.State)
	st, err = holder.Check(ctx, 0)
	if st.State == lease.Held {
		require.NoError(t, err)
		return true
	}
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	return false
}

// finishedCalls is how many store calls r counts as finished.
func finishedCalls(r lease.Report) uint64 {
	var n uint64
	for _, c := range []leasestore.Calls{r.Calls.Claim, r.Calls.Extend, r.Calls.Revoke} {
		n += c.OK + c.Definitive + c.NotSent + c.Ambiguous
	}
	return n
}

// settledScaled is leasetest.Settle for a tracker on sc: it waits until tr
// has finished at least minCalls store calls and waits for a time after
// clk's now.
func settledScaled(ctx context.Context, t *testing.T, tr *lease.Tracker, clk *testclock.Clock, sc *scaledClock, minCalls uint64) lease.Report {
	t.Helper()
	for {
		r := tr.Report()
		if finishedCalls(r) >= minCalls && !r.NextCall.IsZero() && sc.storeTime(r.NextCall).After(clk.Now()) {
			return r
		}
		select {
		case <-clk.Alarms():
		case <-ctx.Done():
			t.Fatalf("the holder never settled: %+v", r)
		}
	}
}
