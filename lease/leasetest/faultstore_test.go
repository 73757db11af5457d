package leasetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const term = time.Minute

func newStores() (*testclock.Clock, *leasestore.MemStore, *leasetest.FaultStore) {
	clk := testclock.NewClock(t0)
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	return clk, mem, leasetest.NewFaultStore(mem, leasetest.FaultStoreConfig{Clock: clk})
}

// A FaultStore without faults is a Store like the one it wraps.
func TestFaultStorePassesContract(t *testing.T) {
	leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
		clk, _, fs := newStores()
		return leasetest.Harness{Store: fs, Advance: clk.Advance, Term: term}
	})
}

func TestFaultStoreTimeoutIsNotApplied(t *testing.T) {
	_, mem, fs := newStores()
	fs.Next(leasetest.OpClaim, leasetest.Timeout)
	_, err := fs.Claim(context.Background(), "l", "a", term)
	require.ErrorIs(t, err, leasetest.ErrInjectedTimeout)
	assert.NotErrorIs(t, err, leasestore.ErrHeld)
	assert.NotErrorIs(t, err, leasestore.ErrNotHeld)
	_, err = mem.Holder(context.Background(), "l")
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "the claim never reached the store")
	_, err = fs.Claim(context.Background(), "l", "a", term)
	require.NoError(t, err, "a queued fault applies to one call")
	assert.Equal(t, 2, fs.Calls(leasetest.OpClaim))
	assert.Equal(t, 0, fs.Calls(leasetest.OpExtend|leasetest.OpRevoke))
}

func TestFaultStoreAppliedTimeoutIsApplied(t *testing.T) {
	clk, mem, fs := newStores()
	g, err := fs.Claim(context.Background(), "l", "a", term)
	require.NoError(t, err)
	clk.Advance(30 * time.Second)
	fs.Next(leasetest.OpExtend, leasetest.AppliedTimeout)
	_, err = fs.Extend(context.Background(), g, term)
	require.ErrorIs(t, err, leasetest.ErrInjectedTimeout)
	cur, err := mem.Holder(context.Background(), "l")
	require.NoError(t, err)
	assert.Equal(t, term, cur.Duration, "the extend was applied")
	assert.Equal(t, g.Token, cur.Token)
}

func TestFaultStoreLost(t *testing.T) {
	_, mem, fs := newStores()
	g, err := fs.Claim(context.Background(), "l", "a", term)
	require.NoError(t, err)
	fs.Next(leasetest.OpExtend, leasetest.Lost)
	_, err = fs.Extend(context.Background(), g, term)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	_, err = mem.Holder(context.Background(), "l")
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "the term is gone from the store")

	fs.Next(leasetest.OpClaim, leasetest.Lost)
	_, err = fs.Claim(context.Background(), "l", "b", term)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	var he *leasestore.HeldError
	assert.False(t, errors.As(err, &he), "a lost claim names no holder")
}

// blockedNow is how many calls of fs are blocked now (up to 3): WaitBlocked
// with an ended ctx polls.
func blockedNow(fs *leasetest.FaultStore) int {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	for n < 3 && fs.WaitBlocked(ctx, n+1) == nil {
		n++
	}
	return n
}

func TestFaultStoreHangEndsWithContext(t *testing.T) {
	_, mem, fs := newStores()
	fs.Always(leasetest.AnyOp, leasetest.Hang)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := fs.Claim(ctx, "l", "a", term)
		errs <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	require.NoError(t, fs.WaitBlocked(wctx, 1))
	assert.Equal(t, 1, blockedNow(fs))
	cancel()
	err := <-errs
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, leasestore.ErrHeld)
	assert.Equal(t, 0, blockedNow(fs))
	_, err = mem.Holder(context.Background(), "l")
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "a hung call is not applied")

	fs.Always(leasetest.AnyOp, leasetest.Pass)
	_, err = fs.Claim(context.Background(), "l", "a", term)
	require.NoError(t, err, "Always(AnyOp, Pass) heals")
}

func TestFaultStoreLatencyIsOnTheClock(t *testing.T) {
	clk, mem, fs := newStores()
	fs.SetLatency(2*time.Second, 3*time.Second)
	type result struct {
		g   leasestore.Grant
		err error
	}
	results := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		g, err := fs.Claim(ctx, "l", "a", term)
		results <- result{g, err}
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	require.NoError(t, fs.WaitBlocked(wctx, 1))
	_, err := mem.Holder(context.Background(), "l")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "not applied during the request latency")
	require.NoError(t, clk.WaitAdvance(2*time.Second, 5*time.Second, 1))

	// Now the store has applied the claim; the answer is on its way back.
	require.NoError(t, clk.WaitAdvance(time.Second, 5*time.Second, 1))
	cur, err := mem.Holder(context.Background(), "l")
	require.NoError(t, err)
	assert.Equal(t, "a", cur.Holder)
	cancel() // the answer is lost: applied, but ambiguous
	r := <-results
	require.ErrorIs(t, r.err, context.Canceled)
	assert.NotErrorIs(t, r.err, leasestore.ErrHeld)
}

func TestFaultStoreQueuedBeforeStanding(t *testing.T) {
	_, _, fs := newStores()
	fs.Always(leasetest.OpClaim, leasetest.Timeout)
	fs.Next(leasetest.OpClaim, leasetest.Pass, leasetest.Lost)
	_, err := fs.Claim(context.Background(), "l", "a", term)
	require.NoError(t, err)
	_, err = fs.Claim(context.Background(), "m", "a", term)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	_, err = fs.Claim(context.Background(), "n", "a", term)
	require.ErrorIs(t, err, leasetest.ErrInjectedTimeout)
}

func TestFaultAndOpStrings(t *testing.T) {
	assert.Equal(t, "hang", leasetest.Hang.String())
	assert.Equal(t, "applied-timeout", leasetest.AppliedTimeout.String())
	assert.Equal(t, "extend", leasetest.OpExtend.String())
	assert.Equal(t, "Op(0x7)", leasetest.AnyOp.String())
}

func requireClosed(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(why)
	default:
	}
}

// FaultStore forwards the wrapped store's Lost signals (a Lost fault, which
// revokes the term, is one) and adds spurious ones with SignalLost.
func TestFaultStoreLostForwardsAndSignals(t *testing.T) {
	_, _, fs := newStores()
	ctx := context.Background()
	a, err := fs.Claim(ctx, "a", "h", term)
	require.NoError(t, err)
	b, err := fs.Claim(ctx, "b", "h", term)
	require.NoError(t, err)
	lostA, lostB := fs.Lost(ctx, a), fs.Lost(ctx, b)

	fs.Next(leasetest.OpExtend, leasetest.Lost)
	_, err = fs.Extend(ctx, a, term)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	requireClosed(t, lostA, "the wrapped store's signal was not forwarded")
	requireOpen(t, lostB, "another lease's watch fired")

	assert.Equal(t, 1, fs.SignalLost("b"))
	requireClosed(t, lostB, "SignalLost did not close the watch")
	_, err = fs.Extend(ctx, b, term)
	require.NoError(t, err, "a spurious signal: the term is still held")
	assert.Zero(t, fs.SignalLost("b"), "a closed watch is not signalled twice")
}

// Over a store that cannot watch, only SignalLost closes a Lost channel;
// a watch whose ctx ended is never signalled.
func TestFaultStoreLostOverStoreWithoutNotifier(t *testing.T) {
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: testclock.NewClock(t0)})
	fs := leasetest.NewFaultStore(struct{ leasestore.Store }{mem}, leasetest.FaultStoreConfig{})
	g, err := fs.Claim(context.Background(), "l", "h", term)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ended := fs.Lost(ctx, g)
	cancel()
	lost := fs.Lost(context.Background(), g)
	require.NoError(t, fs.Revoke(context.Background(), g))
	requireOpen(t, lost, "the wrapped store cannot watch")
	assert.Equal(t, 1, fs.SignalLost("l"))
	requireClosed(t, lost, "SignalLost did not close the watch")
	requireOpen(t, ended, "a watch whose ctx ended was signalled")
}

// TestFaultStoreReportClassifiesFaults: a FaultStore counts the answers it
// gives, each fault in its class — whatever the wrapped store counted — and
// a hung call is in flight until its ctx ends.
func TestFaultStoreReportClassifiesFaults(t *testing.T) {
	ctx := context.Background()
	_, mem, fs := newStores()
	var _ leasestore.Reporter = fs

	fs.Next(leasetest.OpClaim, leasetest.Timeout, leasetest.NotSent, leasetest.Lost, leasetest.AppliedTimeout)
	for range 4 {
		_, err := fs.Claim(ctx, "l", "a", term)
		require.Error(t, err)
	}
	_, err := fs.Claim(ctx, "m", "a", term) // Pass
	require.NoError(t, err)
	g, err := mem.Holder(ctx, "l") // the AppliedTimeout claim was applied
	require.NoError(t, err)

	fs.Next(leasetest.OpExtend, leasetest.Pass, leasetest.NotSent, leasetest.AppliedTimeout, leasetest.Lost)
	for i := range 4 {
		_, err := fs.Extend(ctx, g, term)
		require.Equal(t, i == 0, err == nil, "extend %d: %v", i, err)
	}
	fs.Next(leasetest.OpRevoke, leasetest.Pass) // the term is over: ErrNotHeld
	require.ErrorIs(t, fs.Revoke(ctx, g), leasestore.ErrNotHeld)

	fs.Next(leasetest.OpRevoke, leasetest.Hang)
	hctx, cancel := context.WithCancel(ctx)
	errs := make(chan error, 1)
	go func() { errs <- fs.Revoke(hctx, g) }()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	require.NoError(t, fs.WaitBlocked(wctx, 1))
	assert.Equal(t, 1, fs.StoreReport().InFlight, "the hung revoke")
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)

	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 1, Definitive: 1, NotSent: 1, Ambiguous: 2},
		Extend: leasestore.Calls{OK: 1, Definitive: 1, NotSent: 1, Ambiguous: 1},
		Revoke: leasestore.Calls{Definitive: 1, Ambiguous: 1},
	}, fs.StoreReport())
	// What reached the wrapped store: two claims and two extends (the
	// applied timeouts answered OK there), the Lost fault's revoke, the
	// revoke of a term already over.
	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 2},
		Extend: leasestore.Calls{OK: 2},
		Revoke: leasestore.Calls{OK: 1, Definitive: 1},
	}, mem.StoreReport())
}

func TestFaultStoreNotSentIsNotAmbiguous(t *testing.T) {
	_, mem, fs := newStores()
	fs.Next(leasetest.OpClaim, leasetest.NotSent)
	_, err := fs.Claim(context.Background(), "l", "a", term)
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	assert.NotErrorIs(t, err, leasetest.ErrInjectedTimeout)
	_, err = mem.Holder(context.Background(), "l")
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "nothing reached the store")
	assert.Equal(t, "not-sent", leasetest.NotSent.String())
}

// A call whose ctx ends while it waits out injected latency leaves no
// timer on the clock: a test counting the clock's waiters (WaitAdvance)
// is not misled by it.
func TestFaultStoreLatencyLeavesNoTimer(t *testing.T) {
	clk, _, fs := newStores()
	fs.SetLatency(time.Second, 0)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := fs.Claim(ctx, "l", "a", time.Minute)
		errs <- err
	}()
	require.NoError(t, fs.WaitBlocked(waitCtx(t), 1))
	cancel()
	select {
	case err := <-errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(wait):
		t.Fatal("the claim did not end with its ctx")
	}
	assert.Error(t, clk.WaitAdvance(time.Hour, 0, 1), "the latency timer is still waiting")
}
