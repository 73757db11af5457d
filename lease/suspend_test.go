package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// withSleep makes the tracker's sleep meter read *slept: a test suspends
// the host by raising it while the testclock — the monotonic clock —
// stands still.
func withSleep(slept *atomic.Int64) func(*lease.Config) {
	return func(cfg *lease.Config) {
		*cfg = lease.WithClocksForTest(*cfg, func(time.Time) (time.Duration, time.Duration) {
			return time.Duration(slept.Load()), 0
		})
	}
}

// TestSuspendIsUnknownUntilConfirmed: the host slept 40 s with 57 s of the
// term left. Its monotonic clock stood still, so Until still lies 57 s
// ahead by the tracker's clock, but only ~17 s by the store's, and a late
// timer cannot tell. The tracker must answer Unknown — not Held, never
// NotLeader — until the store confirms again.
func TestSuspendIsUnknownUntilConfirmed(t *testing.T) {
	var slept atomic.Int64
	f := newFixture(t, withSleep(&slept), nil)
	first := f.held(t)
	_, err := f.check(t, dur)
	require.NoError(t, err)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)

	slept.Store(int64(40 * time.Second)) // the host resumes

	r := f.tr.Report() // asks the store nothing
	assert.Equal(t, lease.Unknown, r.State)
	require.ErrorIs(t, r.Err, lease.ErrRenewalFailed)
	assert.ErrorContains(t, r.Err, "the host was suspended: its monotonic clock stopped (40s since the store last confirmed the lease)")
	cur, _ := f.tr.Current()
	assert.Equal(t, lease.Unknown, cur.State, "Current says it at once")

	st, err := f.check(t, 0) // the store cannot confirm
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, err, lease.ErrNotLeader, "a suspend is not a loss")
	assert.Equal(t, lease.Unknown, st.State, "Until (%v) is ahead on the stopped clock, but no promise", st.Until)
	assert.Equal(t, first.Token, st.Token)
	assert.Equal(t, lease.Unknown, f.nextState(t, lease.Unknown).State, "published, for followers")

	f.store.Always(leasetest.OpExtend, leasetest.Pass)
	st, err = f.check(t, dur)
	require.NoError(t, err, "confirmed again")
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, first.Token, st.Token, "the same term")
	st, err = f.check(t, dur) // from cache again: the suspend is behind the confirmation
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
}

// TestSuspendDuringRenewalIsUnknown: the host slept while a renewal was in
// flight, which then failed ambiguously. The failure must not keep Held on
// the validity confirmed before the suspend.
func TestSuspendDuringRenewalIsUnknown(t *testing.T) {
	var slept atomic.Int64
	f := newFixture(t, withSleep(&slept), nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Hang)
	f.expectIdle(t, renewAt)
	f.waitBlocked(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout) // for the checks' renewals
	slept.Store(int64(10 * time.Second))
	require.NoError(t, f.clk.WaitAdvance(callTimeout, wait, 1), "the call timeout")
	st := f.nextState(t, lease.Unknown)
	assert.Equal(t, first.Token, st.Token)
	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, err, lease.ErrNotLeader)
	assert.Equal(t, lease.Unknown, st.State)
}

// TestSuspendEndsLeadership: a Lead function's ctx ends after a suspend
// once the tracker has published Unknown — here asked for by a follower's
// Current — with a cause matching ErrRenewalFailed, never ErrNotLeader.
func TestSuspendEndsLeadership(t *testing.T) {
	var slept atomic.Int64
	f := newFixture(t, withSleep(&slept), nil)
	f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
		slept.Store(int64(time.Minute))
		st, _ := f.tr.Current()
		assert.Equal(t, lease.Unknown, st.State)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			t.Error("leadership outlived a suspend")
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, lease.ErrNotLeader)
}

// TestVMPauseIsUnknownWithinOneCheck: the VM was paused for 40 s with 57 s
// of the term left. Its monotonic clock stopped, and so did CLOCK_BOOTTIME
// (no suspend to see), so Until still lies 57 s ahead by the tracker's
// clock, but only ~17 s by the store's. Once the guest's wall clock is
// corrected it is 40 s further ahead of the monotonic clock than at the
// last confirmation: the first Check after that answers Unknown — not
// Held, never NotLeader — and the tracker asks the store.
func TestVMPauseIsUnknownWithinOneCheck(t *testing.T) {
	var in injected
	f := newFixture(t, withInjected(&in), nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)

	in.skew.Add(int64(40 * time.Second)) // resumed, and the wall clock corrected

	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, err, lease.ErrNotLeader, "a pause is not a loss")
	assert.ErrorContains(t, err, "the wall clock jumped ahead of the monotonic clock: the VM may have been paused, stopping it (40s since the store last confirmed the lease)")
	assert.Equal(t, lease.Unknown, st.State, "Until (%v) is ahead on the stopped clock, but no promise", st.Until)
	assert.Equal(t, first.Token, st.Token)
	cur, _ := f.tr.Current()
	assert.Equal(t, lease.Unknown, cur.State)
	assert.Equal(t, lease.Unknown, f.tr.Report().State)

	f.store.Always(leasetest.OpExtend, leasetest.Pass)
	st, err = f.check(t, dur)
	require.NoError(t, err, "confirmed again")
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, first.Token, st.Token, "the same term")
	st, err = f.check(t, dur) // from cache: the jump is behind the confirmation
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
}

// TestWallClockSetCostsOneStoreCall: a wall clock set ahead by hand looks
// like a corrected VM pause; it costs one store call, which confirms the
// lease, and nothing more. One set back is no evidence: no call at all.
func TestWallClockSetCostsOneStoreCall(t *testing.T) {
	var in injected
	f := newFixture(t, withInjected(&in), nil)
	f.held(t)
	calls := f.store.StoreReport().Extend.OK

	in.skew.Add(-int64(time.Hour)) // set back
	st, err := f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, calls, f.store.StoreReport().Extend.OK, "answered from cache")

	in.skew.Add(int64(2 * time.Hour)) // set ahead
	st, err = f.check(t, dur)
	require.NoError(t, err, "the one store call confirms it")
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, calls+1, f.store.StoreReport().Extend.OK)
	_, err = f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, calls+1, f.store.StoreReport().Extend.OK, "and no more")
}

// TestSuspendIsUnknownWithinOneCheck: the first Check after a suspend
// answers Unknown, before any renewal.
func TestSuspendIsUnknownWithinOneCheck(t *testing.T) {
	var in injected
	f := newFixture(t, withInjected(&in), nil)
	f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	in.slept.Add(int64(40 * time.Second)) // boot time gained; the wall clock with it
	in.skew.Add(int64(40 * time.Second))
	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.ErrorContains(t, err, "the host was suspended")
	assert.Equal(t, lease.Unknown, st.State)
}

// TestPauseDuringRenewalIsNotConfirmedByIt: the VM was paused (its wall
// clock corrected) while a renewal sent before the pause was in flight. A
// check that sees the jump must not take that renewal's confirmation as
// its answer — it vouches for nothing after its send — but wait for a
// call sent since, which confirms the lease.
func TestPauseDuringRenewalIsNotConfirmedByIt(t *testing.T) {
	var in injected
	f := newFixture(t, withInjected(&in), nil)
	first := f.held(t)
	f.store.SetLatency(time.Second, 0)
	f.expectIdle(t, renewAt)
	f.waitBlocked(t) // the renewal is sent, its clocks read

	in.skew.Add(int64(40 * time.Second))
	answers := f.checkWaiting(t, dur)
	calls := f.store.Calls(leasetest.OpExtend)
	require.NoError(t, f.clk.WaitAdvance(time.Second, wait, 2), "the renewal's latency and call timeout")
	st := f.next(t) // the renewal confirmed, with the clocks read before the jump
	assert.Equal(t, lease.Unknown, st.State, "no promise since the jump")
	f.waitBlocked(t) // the check's call, sent after the jump
	assert.Equal(t, calls+1, f.store.Calls(leasetest.OpExtend), "a call of the check's own")
	require.NoError(t, f.clk.WaitAdvance(time.Second, wait, 2), "its latency and call timeout")
	a := <-answers
	require.NoError(t, a.err)
	assert.Equal(t, lease.Held, a.st.State)
	assert.Equal(t, first.Token, a.st.Token)
}
