package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// injected is what a test makes the tracker read as the host's clocks and
// the process's load: each figure a total it raises to make a cause.
type injected struct {
	slept, skew                                   atomic.Int64
	throttled, throttledFor, gcPauses, schedDelay atomic.Uint64
}

func withInjected(in *injected) func(*lease.Config) {
	return func(cfg *lease.Config) {
		*cfg = lease.WithClocksForTest(*cfg, func(time.Time) (time.Duration, time.Duration) {
			return time.Duration(in.slept.Load()), time.Duration(in.skew.Load())
		})
		*cfg = lease.WithLoadForTest(*cfg, func(time.Duration) lease.LoadForTest {
			return lease.LoadForTest{Throttled: in.throttled.Load(), ThrottledFor: time.Duration(in.throttledFor.Load()),
				GCPauses: in.gcPauses.Load(), SchedDelays: in.schedDelay.Load()}
		})
	}
}

// TestStarvedRenewerKeepsHeld: the renewal timer fires 10 s late (a process
// starved of CPU, throttled, stalled by the GC: the monotonic clock ran
// on), more than the Margin (3 s), with 18.5 s of the promise left. The
// deadline is exact, so nothing is in doubt: the tracker renews at once,
// stays Held throughout, and the Lead function runs on. (The late-timer
// rule made it Unknown and ended the Lead function.)
func TestStarvedRenewerKeepsHeld(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	l := startLead(t, f.tr)
	run := l.next(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(renewAt + 10*time.Second)

	st := f.next(t)
	assert.Equal(t, lease.Held, st.State, "the first change is the renewal, not Unknown")
	assert.Equal(t, first.Token, st.Token)
	assert.Equal(t, t0.Add(renewAt+10*time.Second+until0), st.Until, "renewed when it woke")
	r := f.tr.Report()
	assert.Equal(t, uint64(1), r.Transitions, "Held since the claim")
	assert.Zero(t, r.UnknownFor)
	assert.Equal(t, uint64(1), r.LateRenewals)
	require.NoError(t, run.ctx.Err(), "the Lead function leads on")
	st, err := f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
}

// TestLateRenewalInFlightKeepsTheDeadline: a renewal sent past the Margin
// that hangs keeps Held while the validity lasts, and answers Unknown at
// its Until, as any unanswered renewal does: the late timer adds nothing.
func TestLateRenewalInFlightKeepsTheDeadline(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Hang)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(renewAt + dur/10 + 1)
	f.waitBlocked(t)
	cur, _ := f.tr.Current()
	assert.Equal(t, lease.Held, cur.State)
	assert.Equal(t, first.Until, cur.Until)
	st, err := f.tr.Check(context.Background(), 0)
	require.NoError(t, err, "from cache: the promise stands")
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, uint64(1), f.tr.Report().LateRenewals)
}

// TestLateRenewalsAreExplained: each late renewal is counted under the
// first cause the readings across its wait show, and one on time is
// counted under none.
func TestLateRenewalsAreExplained(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause func(*injected)
		count func(lease.Report) uint64
	}{
		{"unexplained", func(*injected) {}, func(r lease.Report) uint64 {
			return r.LateRenewals - r.LateSuspend - r.LateClockStep - r.LateThrottled - r.LateGCPause - r.LateScheduler
		}},
		{"suspend", func(in *injected) { in.slept.Add(int64(time.Second)); in.skew.Add(int64(time.Second)) },
			func(r lease.Report) uint64 { return r.LateSuspend }},
		{"clock-step", func(in *injected) { in.skew.Add(-int64(time.Minute)) },
			func(r lease.Report) uint64 { return r.LateClockStep }},
		{"throttled-periods", func(in *injected) { in.throttled.Add(3) },
			func(r lease.Report) uint64 { return r.LateThrottled }},
		{"throttled-time", func(in *injected) { in.throttledFor.Add(uint64(time.Second)) },
			func(r lease.Report) uint64 { return r.LateThrottled }},
		{"gc-pause", func(in *injected) { in.gcPauses.Add(1); in.schedDelay.Add(1) },
			func(r lease.Report) uint64 { return r.LateGCPause }},
		{"scheduler", func(in *injected) { in.schedDelay.Add(2) },
			func(r lease.Report) uint64 { return r.LateScheduler }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in injected
			in.throttled.Store(7) // totals since long before
			f := newFixture(t, withInjected(&in), nil)
			f.held(t)
			f.expectIdle(t, renewAt) // on time
			require.Equal(t, renewAt, f.nextIdle(t))
			assert.Zero(t, f.tr.Report().LateRenewals, "on time")
			tc.cause(&in)
			f.clk.Advance(renewAt + time.Second) // later than Margin/4
			f.nextIdle(t)
			r := f.tr.Report()
			assert.Equal(t, uint64(1), r.LateRenewals)
			assert.Equal(t, uint64(1), tc.count(r), "%+v", r)
			st, err := f.check(t, dur)
			require.NoError(t, err)
			assert.Equal(t, lease.Held, st.State)
		})
	}
}

// TestLateRenewalBoundIsAQuarterOfTheMargin: late by Margin/4 (750 ms) is
// on time; a nanosecond more is late.
func TestLateRenewalBoundIsAQuarterOfTheMargin(t *testing.T) {
	for _, tc := range []struct {
		late time.Duration
		want uint64
	}{{dur / 40, 0}, {dur/40 + 1, 1}} {
		t.Run(tc.late.String(), func(t *testing.T) {
			f := newFixture(t, nil, nil)
			f.held(t)
			require.Equal(t, renewAt, f.nextIdle(t))
			f.clk.Advance(renewAt + tc.late)
			f.nextIdle(t)
			assert.Equal(t, tc.want, f.tr.Report().LateRenewals)
		})
	}
}

// TestLogLateRenewalOncePerEpisode: late renewals in a row make one record,
// with how late and why; an on-time renewal ends the episode, and the next
// late one makes a record again. No state changes: no other record.
func TestLogLateRenewalOncePerEpisode(t *testing.T) {
	var in injected
	f, c := newLoggedFixture(t, withInjected(&in), nil)
	f.held(t)
	settle(t, f)
	c.take()
	// The cause is made while the renewer waits, after its first reading.
	lateRenewal := func(late time.Duration, cause *atomic.Uint64) {
		t.Helper()
		require.Equal(t, renewAt, f.nextIdle(t))
		if cause != nil {
			cause.Add(1)
		}
		f.clk.Advance(renewAt + late)
	}
	lateRenewal(2*time.Second, &in.gcPauses)
	lateRenewal(time.Second, &in.throttled)
	lateRenewal(0, nil) // on time: the episode ends
	lateRenewal(5*time.Second, nil)
	f.nextIdle(t)
	recs := c.take()
	require.Equal(t, []string{"WARN lease renewal late", "WARN lease renewal late"}, logged(recs))
	assert.Equal(t, 2*time.Second, recs[0].attrs["late"].Duration())
	assert.Equal(t, "gc-pause", recs[0].attrs["cause"].String())
	assert.Equal(t, uint64(1), recs[0].attrs["token"].Uint64())
	assert.Equal(t, 5*time.Second, recs[1].attrs["late"].Duration())
	assert.Equal(t, "unexplained", recs[1].attrs["cause"].String())
	r := f.tr.Report()
	assert.Equal(t, uint64(3), r.LateRenewals)
	assert.Equal(t, uint64(1), r.LateGCPause)
	assert.Equal(t, uint64(1), r.LateThrottled)
	assert.Equal(t, uint64(1), r.Transitions, "Held throughout")
}

// slowExtends is a Store whose Extend takes lat on the testclock.
type slowExtends struct {
	leasestore.Store
	clk *testclock.Clock
	lat atomic.Int64
}

func (s *slowExtends) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	s.clk.Advance(time.Duration(s.lat.Load()))
	return s.Store.Extend(ctx, g, d)
}

// TestRenewalComesEarlierAsTheStoreSlows: with RenewFraction 0.9 a
// renewal leaves 5.7 s of its 57 s validity. Once the store takes 2 s a
// call, it goes early enough to leave 4 latencies (8 s); as the latency
// decays (halved per call), the schedule comes back to RenewFraction's.
func TestRenewalComesEarlierAsTheStoreSlows(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := &slowExtends{Store: leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), clk: clk}
	tr, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: dur, RenewFraction: 0.9, Clock: clk,
	}))
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	const interval = 51300 * time.Millisecond // 0.9 × 57 s
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	calls := uint64(1)
	nextIn := func() time.Duration {
		t.Helper()
		r, err := leasetest.Settle(ctx, tr, clk, calls)
		require.NoError(t, err)
		calls++
		return r.NextCall.Sub(clk.Now())
	}
	require.Equal(t, interval, nextIn(), "after the claim (instant)")
	store.lat.Store(int64(2 * time.Second))
	clk.Advance(interval)
	// Sent at s, answered at s+2s: the renewal goes at s + 57s − 8s.
	assert.Equal(t, 49*time.Second-2*time.Second, nextIn(), "4 latencies left")
	store.lat.Store(0)
	clk.Advance(47 * time.Second)
	// The recent latency is now 1 s: 4 s left is less than 5.7 s.
	assert.Equal(t, interval, nextIn(), "back to RenewFraction's")
	st, err := tr.Check(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
}

// TestLateWakeBringsTheNextRenewalEarlier: how late a renewal woke counts
// in the renew latency, as the store's does: a renewal 2 s late on a
// schedule that leaves 5.7 s makes the next leave 8 s.
func TestLateWakeBringsTheNextRenewalEarlier(t *testing.T) {
	f := newFixture(t, func(cfg *lease.Config) { cfg.RenewFraction = 0.9 }, nil)
	f.held(t)
	const interval = 51300 * time.Millisecond // 0.9 × 57 s
	require.Equal(t, interval, f.nextIdle(t))
	f.clk.Advance(interval + 2*time.Second)
	assert.Equal(t, 49*time.Second, f.nextIdle(t), "57 s − 4 × 2 s")
	f.clk.Advance(49 * time.Second) // on time; the 2 s decays to 1 s
	assert.Equal(t, interval, f.nextIdle(t))
	assert.Equal(t, uint64(1), f.tr.Report().LateRenewals)
}
