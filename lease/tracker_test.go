package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// The incident's numbers: is-leader promises 30 s, leases are claimed for
// 60 s. With the default Margin (3 s) a claim at t0 is valid until t0+57s,
// and the renewal (RenewFraction 0.5, no jitter) is due at t0+28.5s.
const (
	dur         = 30 * time.Second
	until0      = 57 * time.Second
	renewAt     = 28500 * time.Millisecond
	callTimeout = 7500 * time.Millisecond // Duration/4
	firstRetry  = 375 * time.Millisecond  // the first retry: (Duration/10)/8
	wait        = 5 * time.Second         // real-time bound on a test's own waits
)

var t0 = time.Date(2026, 11, 30, 6, 26, 0, 0, time.UTC)

type fixture struct {
	clk   *testclock.Clock
	mem   *leasestore.MemStore
	store *leasetest.FaultStore
	tr    *lease.Tracker
	// calls is how many store calls the idle waits seen so far followed.
	calls uint64
	// seen is the Current channel of the status next returned last.
	seen <-chan struct{}
}

// settled reports whether tr's renewer waits for the clock with no store
// call in flight or asked for: nothing happens until the clock moves.
func settled(clk *testclock.Clock, tr *lease.Tracker) bool {
	r := tr.Report()
	return r.Closed || !r.NextCall.IsZero() && r.NextCall.After(clk.Now())
}

// newFixture starts a tracker "unit-0" on lease "singular" over a
// FaultStore over a MemStore, all on a testclock at t0, without jitter
// (mod may put it back with lease.WithJitterForTest).
// before runs before the tracker starts (e.g. to inject faults).
//
// The FaultStore wraps only the MemStore's Store methods: some of these
// tests count the clock's waiters (WaitAdvance), and MemStore's Lost arms
// an expiry timer that would be counted too. The FaultStore's own Lost
// still fires on SignalLost. The loss-notification tests use
// newNotifyingFixture.
func newFixture(t *testing.T, mod func(*lease.Config), before func(f *fixture)) *fixture {
	t.Helper()
	return startFixture(t, false, mod, before)
}

// newNotifyingFixture is newFixture with MemStore's LossNotifier passed
// through the FaultStore to the tracker.
func newNotifyingFixture(t *testing.T, mod func(*lease.Config), before func(f *fixture)) *fixture {
	t.Helper()
	return startFixture(t, true, mod, before)
}

// storeOnly hides every method of a Store but the Store interface's.
type storeOnly struct{ leasestore.Store }

func startFixture(t *testing.T, notify bool, mod func(*lease.Config), before func(f *fixture)) *fixture {
	t.Helper()
	clk := testclock.NewClock(t0)
	f := &fixture{clk: clk}
	f.mem = leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	if notify {
		f.store = leasetest.NewFaultStore(f.mem, leasetest.FaultStoreConfig{Clock: clk})
	} else {
		f.store = leasetest.NewFaultStore(storeOnly{f.mem}, leasetest.FaultStoreConfig{Clock: clk})
	}
	cfg := lease.WithoutJitterForTest(lease.Config{
		Store: f.store, Name: "singular", Holder: "unit-0", Duration: dur, Clock: f.clk,
	})
	if mod != nil {
		mod(&cfg)
	}
	if before != nil {
		before(f)
	}
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	f.tr = tr
	t.Cleanup(func() { _ = tr.Close() })
	return f
}

// nextIdle waits for the renewer's next wait — the one after its next
// store call — with leasetest.Settle, and returns its delay.
func (f *fixture) nextIdle(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f.calls++
	r, err := leasetest.Settle(ctx, f.tr, f.clk, f.calls)
	require.NoError(t, err, "the renewer never went idle")
	return r.NextCall.Sub(f.clk.Now())
}

// expectIdle asserts the renewer's next wait is want, then advances the
// clock by it so that the renewer wakes.
func (f *fixture) expectIdle(t *testing.T, want time.Duration) {
	t.Helper()
	require.Equal(t, want, f.nextIdle(t), "renewer's wait")
	f.clk.Advance(want)
}

// next returns the tracker's status after the last one next returned, as
// a follower of Current sees it (the first call skips the initial Unknown
// status, from before any claim was answered).
func (f *fixture) next(t *testing.T) lease.Status {
	t.Helper()
	for {
		st, changed := f.tr.Current()
		if changed != f.seen && (f.seen != nil || st != lease.Status{}) {
			f.seen = changed
			return st
		}
		select {
		case <-changed:
		case <-time.After(wait):
			t.Fatal("no status change")
			return lease.Status{}
		}
	}
}

// noChange asserts that the status has not changed since next last
// returned.
func (f *fixture) noChange(t *testing.T, why string) {
	t.Helper()
	if st, changed := f.tr.Current(); changed != f.seen {
		t.Fatalf("%s: status changed to %+v", why, st)
	}
}

// nextState reads statuses until a status in state s arrives.
func (f *fixture) nextState(t *testing.T, s lease.State) lease.Status {
	t.Helper()
	for {
		if st := f.next(t); st.State == s {
			return st
		}
	}
}

// waitBlocked waits until a store call is blocked (on latency or a Hang).
func (f *fixture) waitBlocked(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, f.store.WaitBlocked(ctx, 1))
}

func (f *fixture) check(t *testing.T, atLeast time.Duration) (lease.Status, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return f.tr.Check(ctx, atLeast)
}

type answer struct {
	st  lease.Status
	err error
}

// checkWaiting starts a Check for atLeast and returns once the check waits
// for a store call, with the channel its answer will come on.
func (f *fixture) checkWaiting(t *testing.T, atLeast time.Duration) <-chan answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	wctx := newWaitingCtx(ctx)
	answers := make(chan answer, 1)
	go func() {
		defer cancel()
		st, err := f.tr.Check(wctx, atLeast)
		answers <- answer{st, err}
	}()
	wctx.awaitWaiting(t)
	return answers
}

// waitingCtx is a Context that tells when a Check begins to wait for a
// store call: Check reads ctx.Done only then (an answer from the cached
// status, or an invalid argument, never touches ctx).
type waitingCtx struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func newWaitingCtx(parent context.Context) *waitingCtx {
	return &waitingCtx{Context: parent, waiting: make(chan struct{})}
}

func (c *waitingCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

func (c *waitingCtx) awaitWaiting(t *testing.T) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(wait):
		t.Fatal("the check never waited for a store call")
	}
}

// held waits for the first claim and returns its status.
func (f *fixture) held(t *testing.T) lease.Status {
	t.Helper()
	st := f.next(t)
	require.Equal(t, lease.Held, st.State, "first status: %+v", st)
	require.Equal(t, "unit-0", st.Holder)
	require.Equal(t, t0.Add(until0), st.Until)
	require.NotZero(t, st.Token)
	return st
}

func requireRenewalFailedHeld(t *testing.T, st lease.Status, err error, until time.Time) {
	t.Helper()
	require.Error(t, err)
	assert.NotErrorIs(t, err, lease.ErrNotLeader, "an unconfirmed renewal must never read as not leader")
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	var rfe *lease.RenewalFailedError
	require.ErrorAs(t, err, &rfe)
	assert.Equal(t, until, rfe.Until)
	assert.Equal(t, lease.Held, st.State, "still held until %v", until)
	assert.Equal(t, until, st.Until)
	assert.Equal(t, "unit-0", st.Holder)
}

func TestRenewalSucceeds(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)

	st, err := f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, first, st)

	f.expectIdle(t, renewAt)
	st = f.next(t)
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, first.Token, st.Token, "an extend keeps the term's token")
	assert.Equal(t, t0.Add(renewAt+until0), st.Until, "until = sent + granted − margin")

	f.expectIdle(t, renewAt)
	st = f.next(t)
	assert.Equal(t, t0.Add(2*renewAt+until0), st.Until)
	assert.Equal(t, 1, f.store.Calls(leasetest.OpClaim))
	assert.Equal(t, 2, f.store.Calls(leasetest.OpExtend))
}

func TestCheckAnswersFromCacheWithoutStoreCall(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Always(leasetest.AnyOp, leasetest.Hang) // any store call would block
	for _, atLeast := range []time.Duration{0, time.Second, dur, until0} {
		st, err := f.check(t, atLeast)
		require.NoError(t, err, "atLeast %v", atLeast)
		assert.Equal(t, first, st)
	}
	assert.Equal(t, 1, f.store.Calls(leasetest.AnyOp), "only the first claim reached the store")
}

func TestCheckRejectsInvalidAtLeast(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	for _, atLeast := range []time.Duration{-time.Nanosecond, until0 + time.Nanosecond, 2 * dur} {
		_, err := f.check(t, atLeast)
		assert.ErrorIs(t, err, jujuerrors.NotValid, "atLeast %v", atLeast)
	}

	// Also when the store granted more than asked (etcd rounds up), so the
	// cache covers more than the longest promise: the fast path agrees.
	f = newFixture(t, func(c *lease.Config) { c.Store = generousStore{c.Store} }, nil)
	st := f.next(t)
	require.Equal(t, t0.Add(4*dur-dur/10), st.Until, "granted twice what was asked")
	_, err := f.check(t, until0+time.Nanosecond)
	assert.ErrorIs(t, err, jujuerrors.NotValid)
}

// generousStore claims and extends for twice the duration asked.
type generousStore struct{ leasestore.Store }

func (s generousStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	return s.Store.Claim(ctx, name, holder, 2*d)
}

func (s generousStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	return s.Store.Extend(ctx, g, 2*d)
}

// The scenario table: a check that needs a renewal, and what the store does.
func TestAmbiguousFailureBeforeUntilIsRenewalFailedStillHeld(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	f.expectIdle(t, renewAt)

	st, err := f.check(t, dur)
	requireRenewalFailedHeld(t, st, err, first.Until)
	assert.ErrorIs(t, err, leasetest.ErrInjectedTimeout, "the cause is the store's error")

	// The promise still holds for shorter checks: no store call, no error.
	st, err = f.check(t, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, first, st)
}

func TestAmbiguousFailureAfterUntilIsUnknown(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	f.expectIdle(t, renewAt)
	// Retries back off from Duration/80, doubling to Duration/10, and the
	// last wait is cut short so that the validity's end is noticed on time.
	now := renewAt
	backoff := []time.Duration{firstRetry, 2 * firstRetry, 4 * firstRetry}
	for range 8 {
		backoff = append(backoff, 3*time.Second) // capped at Duration/10
	}
	backoff = append(backoff, 1875*time.Millisecond) // cut short at Until
	for _, want := range backoff {
		f.expectIdle(t, want)
		now += want
	}
	require.Equal(t, until0, now, "the tracker woke exactly at Until")
	st := f.nextState(t, lease.Unknown)
	assert.Equal(t, first.Until, st.Until)
	assert.Equal(t, first.Token, st.Token)

	st, err := f.check(t, dur)
	require.ErrorIs(t, err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, err, lease.ErrNotLeader)
	assert.Equal(t, lease.Unknown, st.State)
	assert.Empty(t, st.Holder)
}

func TestOtherHolderIsNotLeaderNamingIt(t *testing.T) {
	var other leasestore.Grant
	f := newFixture(t, nil, func(f *fixture) {
		var err error
		other, err = f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
		require.NoError(t, err)
	})
	st := f.next(t)
	assert.Equal(t, lease.Status{State: lease.NotHeld, Holder: "unit-1"}, st)

	st, err := f.check(t, dur)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.NotErrorIs(t, err, lease.ErrRenewalFailed)
	assert.ErrorIs(t, err, leasestore.ErrHeld, "unwraps to the store's answer")
	var nle *lease.NotLeaderError
	require.ErrorAs(t, err, &nle)
	assert.Equal(t, "unit-1", nle.Holder)
	assert.Equal(t, lease.NotHeld, st.State)
	assert.Equal(t, "unit-1", st.Holder)
	assert.Equal(t, 1, f.store.Calls(leasetest.OpClaim), "NotHeld is answered from cache")

	// The tracker keeps claiming every ClaimInterval and takes over once the
	// other term has run out.
	f.expectIdle(t, 3*time.Second)
	f.clk.Advance(until0) // unit-1's term (60 s from t0) is over
	for f.nextIdle(t) != renewAt {
		f.clk.Advance(3 * time.Second)
	}
	st, err = f.check(t, dur)
	require.NoError(t, err)
	assert.Greater(t, st.Token, other.Token)
}

func TestLeaseNotFoundIsNotLeader(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Next(leasetest.OpExtend, leasetest.Lost) // the store lost our lease
	f.expectIdle(t, renewAt)

	st, err := f.check(t, dur)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.ErrorIs(t, err, leasestore.ErrNotHeld)
	assert.NotErrorIs(t, err, lease.ErrRenewalFailed)
	assert.Equal(t, lease.NotHeld, st.State)

	// The lease is free: the tracker claims it again soon, as a new term.
	f.expectIdle(t, firstRetry)
	st = f.nextState(t, lease.Held)
	assert.Greater(t, st.Token, first.Token)
}

func TestAmbiguousButAppliedExtendRestoresHeldWithSameToken(t *testing.T) {
	// RenewFraction 0.9 keeps the renewer asleep; checks drive the calls.
	f := newFixture(t, func(c *lease.Config) { c.RenewFraction = 0.9 }, nil)
	first := f.held(t)
	require.Equal(t, 51300*time.Millisecond, f.nextIdle(t))
	f.clk.Advance(10 * time.Second)

	f.store.Next(leasetest.OpExtend, leasetest.AppliedTimeout)
	st, err := f.check(t, 50*time.Second)
	requireRenewalFailedHeld(t, st, err, first.Until)

	g, err := f.mem.Holder(context.Background(), "singular")
	require.NoError(t, err)
	assert.Equal(t, first.Token, g.Token)
	assert.Equal(t, 2*dur, g.Duration, "the store did apply the extend")

	st, err = f.check(t, 50*time.Second)
	require.NoError(t, err)
	assert.Equal(t, lease.Held, st.State)
	assert.Equal(t, first.Token, st.Token, "the same term, confirmed")
	assert.Equal(t, t0.Add(10*time.Second+until0), st.Until)
}

func TestReclaimBySameNameGetsNewTokenOldGrantCannotExtend(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	old := leasestore.Grant{Name: "singular", Holder: "unit-0", Token: first.Token}

	// A restarted process with the same holder name: it must wait for the
	// term (or revoke it), and then gets a new token.
	_, err := f.mem.Claim(context.Background(), "singular", "unit-0", 2*dur)
	var he *leasestore.HeldError
	require.ErrorAs(t, err, &he)
	require.NoError(t, f.mem.Revoke(context.Background(), old))
	fresh, err := f.mem.Claim(context.Background(), "singular", "unit-0", 2*dur)
	require.NoError(t, err)
	require.Greater(t, fresh.Token, first.Token)
	_, err = f.mem.Extend(context.Background(), old, 2*dur)
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "the old grant cannot extend")

	// The old tracker learns it at its next store call.
	f.clk.Advance(time.Second)
	st, err := f.check(t, until0)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.Equal(t, lease.NotHeld, st.State)
	f.expectIdle(t, firstRetry)
	require.Equal(t, 3*time.Second, f.nextIdle(t), "claim denied; claim again after ClaimInterval")
	st, err = f.check(t, dur)
	var nle *lease.NotLeaderError
	require.ErrorAs(t, err, &nle)
	assert.Equal(t, "unit-0", nle.Holder, "the new term is held under the same name, by another process")
	assert.Equal(t, lease.Status{State: lease.NotHeld, Holder: "unit-0"}, st)
}

func TestCurrentNeverBlocksRenewer(t *testing.T) {
	f := newFixture(t, nil, nil)
	// Nobody follows Current while the tracker claims and renews 50 times.
	for range 50 {
		f.expectIdle(t, renewAt)
	}
	require.Equal(t, renewAt, f.nextIdle(t))
	st := f.next(t)
	assert.Equal(t, t0.Add(50*renewAt+until0), st.Until, "a late follower sees the latest status only")
	f.noChange(t, "no backlog")
}

// TestRenewalTimeoutIsNotNotLeader is the field regression: is-leader asked
// for 30 s exactly at renewal time while the lease back end timed out. The
// unit still held ~28.5 s of its term; the answer must be "renewal failed,
// still held until T", never "not the leader".
func TestRenewalTimeoutIsNotNotLeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault leasetest.Fault
	}{
		{"StoreNeverAnswers", leasetest.Hang},
		{"StoreReportsTimeout", leasetest.Timeout},
		{"StoreAppliedButReportsTimeout", leasetest.AppliedTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			first := f.held(t)
			f.store.Always(leasetest.OpExtend, tc.fault)
			f.expectIdle(t, renewAt) // renewal time

			answers := f.checkWaiting(t, dur) // is-leader: at least 30 s
			if tc.fault == leasetest.Hang {
				// The check waits on the hung renewal.
				require.NoError(t, f.clk.WaitAdvance(callTimeout, wait, 1), "the call timeout")
			}
			a := <-answers
			requireRenewalFailedHeld(t, a.st, a.err, first.Until)
			assert.Equal(t, t0.Add(until0), a.st.Until, "~28.5 s of the term are still ours")
		})
	}
}

func TestCheckWaitIsBoundedByContext(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) { f.store.Always(leasetest.OpClaim, leasetest.Hang) })
	ctx, cancel := context.WithCancel(context.Background())
	wctx := newWaitingCtx(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := f.tr.Check(wctx, dur)
		done <- err
	}()
	wctx.awaitWaiting(t)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, lease.ErrNotLeader)
}

func TestPromptRetryAfterAmbiguousFailure(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Next(leasetest.OpExtend, leasetest.Timeout)
	f.expectIdle(t, renewAt)
	f.expectIdle(t, firstRetry) // Duration/80 after the failure
	st := f.next(t)
	assert.Equal(t, first.Token, st.Token)
	assert.Equal(t, t0.Add(renewAt+firstRetry+until0), st.Until)
	f.expectIdle(t, renewAt) // back on the normal schedule
}

func TestAmbiguousClaimIsUnknown(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) {
		f.store.Next(leasetest.OpClaim, leasetest.AppliedTimeout)
		f.store.SetLatency(time.Second, 0) // so that the check joins this claim
	})
	answers := f.checkWaiting(t, dur)
	require.NoError(t, f.clk.WaitAdvance(time.Second, wait, 2), "latency and call timeout")
	a := <-answers
	require.ErrorIs(t, a.err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, a.err, lease.ErrNotLeader)
	assert.Equal(t, lease.Unknown, a.st.State)

	// The claim was applied under our name but we have no token for it: we
	// must wait for that term to end, as a restarted process would.
	f.store.SetLatency(0, 0)
	f.expectIdle(t, firstRetry)
	require.Equal(t, 3*time.Second, f.nextIdle(t))
	st, err := f.check(t, dur)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.Equal(t, lease.Status{State: lease.NotHeld, Holder: "unit-0"}, st)
}

func TestShortTermIsRenewalFailed(t *testing.T) {
	// The store takes 7 s to answer (within the call timeout, 7.5 s): the
	// renewal succeeds but leaves less validity than the check asks for.
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.SetLatency(7*time.Second, 0)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(time.Second)
	answers := f.checkWaiting(t, until0)
	require.NoError(t, f.clk.WaitAdvance(7*time.Second, wait, 2), "latency and call timeout")
	a := <-answers
	requireRenewalFailedHeld(t, a.st, a.err, t0.Add(time.Second+until0))
	assert.ErrorIs(t, a.err, lease.ErrShortTermForTest)
	assert.Equal(t, first.Token, a.st.Token)
}

func TestCloseIsIdempotentAndConcurrent(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { assert.NoError(t, f.tr.Close()) })
	}
	wg.Wait()
	require.NoError(t, f.tr.Close())
	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrClosed)
	assert.Equal(t, lease.NotHeld, st.State)
	last, _ := f.tr.Current()
	assert.Equal(t, lease.Status{State: lease.NotHeld}, last, "final status")

	// Without ReleaseOnClose the term runs on in the store.
	_, err = f.mem.Claim(context.Background(), "singular", "unit-1", dur)
	var he *leasestore.HeldError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "unit-0", he.Holder)
}

func TestCloseReleasesWhenConfigured(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.ReleaseOnClose = true }, nil)
	first := f.held(t)
	require.NoError(t, f.tr.Close())
	g, err := f.mem.Claim(context.Background(), "singular", "unit-1", dur)
	require.NoError(t, err, "a successor claims at once")
	assert.Greater(t, g.Token, first.Token)
}

func TestCloseReleaseIsBoundedByCallTimeout(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.ReleaseOnClose = true }, nil)
	f.held(t)
	f.store.Always(leasetest.OpRevoke, leasetest.Hang)
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	f.waitBlocked(t)
	f.clk.Advance(callTimeout)
	err := <-closed
	require.Error(t, err, "an unconfirmed release is reported")
	assert.ErrorIs(t, err, context.Canceled)
}

func TestCloseEndsHangingCall(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) { f.store.Always(leasetest.OpClaim, leasetest.Hang) })
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Close waited for a hung store call")
	}
	_, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrClosed)
}

func TestWithLeadership(t *testing.T) {
	t.Run("RunsWhileHeldAcrossRenewals", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		first := f.held(t)
		ran := make(chan struct{})
		err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
			close(ran)
			f.expectIdle(t, renewAt)
			f.expectIdle(t, renewAt) // beyond the first Until
			assert.NoError(t, ctx.Err())
			return nil
		})
		require.NoError(t, err)
		<-ran
		assert.Equal(t, first.Token, f.nextState(t, lease.Held).Token)
	})
	t.Run("CancelledAtUntilWhenRenewalsFail", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		first := f.held(t)
		f.store.Always(leasetest.OpExtend, leasetest.Timeout)
		var cancelledAt time.Time
		err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
			f.clk.Advance(until0 - time.Second) // renewals keep failing ambiguously
			select {
			case <-ctx.Done():
				t.Errorf("cancelled before Until: %v", context.Cause(ctx))
			default:
			}
			f.clk.Advance(time.Second)
			<-ctx.Done()
			cancelledAt = f.clk.Now()
			return ctx.Err()
		})
		require.ErrorIs(t, err, lease.ErrRenewalFailed)
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, lease.ErrNotLeader)
		assert.False(t, cancelledAt.Before(first.Until))
	})
	t.Run("CancelledOnLoss", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		f.held(t)
		f.store.Next(leasetest.OpExtend, leasetest.Lost)
		err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
			f.expectIdle(t, renewAt)
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, lease.ErrNotLeader)
	})
	t.Run("CancelledOnClose", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		f.held(t)
		err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
			go f.tr.Close()
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, lease.ErrClosed)
	})
	t.Run("NotRunWhenNotHeld", func(t *testing.T) {
		f := newFixture(t, nil, func(f *fixture) {
			_, err := f.mem.Claim(context.Background(), "singular", "unit-1", dur)
			require.NoError(t, err)
		})
		f.next(t)
		err := f.tr.WithLeadership(context.Background(), func(context.Context) error {
			t.Error("fn ran without the lease")
			return nil
		})
		require.ErrorIs(t, err, lease.ErrNotLeader)
	})
	t.Run("ReturnsFnError", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		f.held(t)
		boom := errors.New("boom")
		err := f.tr.WithLeadership(context.Background(), func(context.Context) error { return boom })
		require.ErrorIs(t, err, boom)
		assert.NotErrorIs(t, err, lease.ErrNotLeader)
	})
}

func TestConfigValidate(t *testing.T) {
	valid := lease.Config{Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}), Name: "n", Holder: "h", Duration: dur}
	require.NoError(t, valid.Validate())
	noStore := valid
	noStore.Store = nil
	require.NoError(t, noStore.Validate(), "settings are checked before a store exists")
	_, err := lease.NewTracker(noStore)
	require.ErrorIs(t, err, jujuerrors.NotValid)
	assert.ErrorContains(t, err, "nil Store")
	for name, mod := range map[string]func(*lease.Config){
		"empty Name":             func(c *lease.Config) { c.Name = "" },
		"empty Holder":           func(c *lease.Config) { c.Holder = "" },
		"zero Duration":          func(c *lease.Config) { c.Duration = 0 },
		"negative Duration":      func(c *lease.Config) { c.Duration = -time.Second },
		"Duration overflows 2×D": func(c *lease.Config) { c.Duration = math.MaxInt64/4 + 1 },
		"RenewFraction 1":        func(c *lease.Config) { c.RenewFraction = 1 },
		"negative RenewFraction": func(c *lease.Config) { c.RenewFraction = -0.1 },
		"tiny RenewFraction":     func(c *lease.Config) { c.RenewFraction = 1e-12 },
		"negative ClaimInterval": func(c *lease.Config) { c.ClaimInterval = -1 },
		"ClaimInterval > D":      func(c *lease.Config) { c.ClaimInterval = dur + 1 },
		"NaN RenewFraction":      func(c *lease.Config) { c.RenewFraction = math.NaN() },
		"negative Margin":        func(c *lease.Config) { c.Margin = -time.Second },
		"Margin of Duration":     func(c *lease.Config) { c.Margin = dur },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := valid
			mod(&cfg)
			assert.ErrorIs(t, cfg.Validate(), jujuerrors.NotValid)
			tr, err := lease.NewTracker(cfg)
			assert.ErrorIs(t, err, jujuerrors.NotValid)
			assert.Nil(t, tr)
		})
	}
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "unknown", lease.Unknown.String())
	assert.Equal(t, "held", lease.Held.String())
	assert.Equal(t, "not-held", lease.NotHeld.String())
	assert.Equal(t, "State(7)", lease.State(7).String())
}

func TestCheckFastPathDoesNotAllocate(t *testing.T) {
	assertCheckDoesNotAllocate(t, newFixture(t, nil, nil))
}

// assertCheckDoesNotAllocate checks that a Check answered from the cache of
// a held lease allocates nothing.
func assertCheckDoesNotAllocate(t *testing.T, f *fixture) {
	t.Helper()
	f.held(t)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := f.tr.Check(ctx, dur); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// TestRenewalIsJitteredEarlyNeverLate: a renewal comes early by up to a
// tenth of its interval, never late.
func TestRenewalIsJitteredEarlyNeverLate(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { *c = lease.WithJitterForTest(*c) }, nil)
	seen := map[time.Duration]bool{}
	for range 20 {
		d := f.nextIdle(t)
		assert.GreaterOrEqual(t, d, renewAt-renewAt/10)
		assert.LessOrEqual(t, d, renewAt, "jitter never delays a renewal")
		seen[d] = true
		f.clk.Advance(d)
	}
	assert.Greater(t, len(seen), 1, "renewals are spread")
}

// TestClaimStormRetriesAreBoundedAndSpread: thousands of trackers started
// together against a store that bounds its calls in flight see their claims
// time out together. Each claim is cut off at the call timeout
// (Duration/4), and the retries back off (Duration/80 doubling to
// Duration/10), each delay drawn from [d/2, d], so the trackers do not
// retry in lock-step (with the test seam's jitter off they are exact).
func TestClaimStormRetriesAreBoundedAndSpread(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter bool
		low    float64 // the least fraction of the un-jittered delay
	}{
		{"Jittered", true, 0.5},
		{"JitterOff", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := func(c *lease.Config) {
				if tc.jitter {
					*c = lease.WithJitterForTest(*c)
				}
			}
			f := newFixture(t, mod, func(f *fixture) {
				f.store.Always(leasetest.OpClaim, leasetest.Hang)
			})
			full := []time.Duration{firstRetry, 2 * firstRetry, 4 * firstRetry}
			for len(full) < 40 {
				full = append(full, 3*time.Second) // capped at Duration/10
			}
			lowest := 1.0 // the least fraction of its un-jittered delay a retry waited
			for i, d := range full {
				f.waitBlocked(t) // claim i+1 hangs until the call timeout cuts it off
				require.NoError(t, f.clk.WaitAdvance(callTimeout, wait, 1), "the call timeout")
				got := f.nextIdle(t)
				require.LessOrEqual(t, got, d, "retry %d", i+1)
				require.GreaterOrEqual(t, got, time.Duration(tc.low*float64(d)), "retry %d", i+1)
				lowest = min(lowest, float64(got)/float64(d))
				f.clk.Advance(got)
			}
			if tc.jitter {
				// Over 40 draws from [d/2, d] one falls below 0.65 d but
				// for odds of 0.7^40 (6e-7): the window reaches down to half.
				assert.Less(t, lowest, 0.65, "retries spread over their jitter window")
			} else {
				assert.Equal(t, 1.0, lowest, "exact without jitter")
			}
			f.waitBlocked(t)
			assert.Equal(t, len(full)+1, f.store.Calls(leasetest.OpClaim), "one claim per wait")
		})
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	nle := &lease.NotLeaderError{Name: "l", Holder: "unit-1", Err: &leasestore.HeldError{Name: "l", Holder: "unit-1"}}
	assert.ErrorIs(t, nle, lease.ErrNotLeader)
	assert.ErrorIs(t, nle, leasestore.ErrHeld)
	assert.NotErrorIs(t, nle, lease.ErrRenewalFailed)
	assert.Equal(t, `lease "l": not the leader: held by "unit-1"`, nle.Error())

	cause := errors.New("i/o timeout")
	rfe := &lease.RenewalFailedError{Name: "l", Err: cause, Until: t0}
	assert.ErrorIs(t, rfe, lease.ErrRenewalFailed)
	assert.ErrorIs(t, rfe, cause)
	assert.NotErrorIs(t, rfe, lease.ErrNotLeader)
	assert.Contains(t, rfe.Error(), "2026-11-30T06:26:00Z")
	assert.Equal(t, `lease "l": claim not confirmed: i/o timeout`,
		(&lease.RenewalFailedError{Name: "l", Err: cause}).Error())
}

// A leader's sentinels name their package, as etcd's do ("election: not
// leader"): a sentinel printed alone (hacontroller's summary prints one)
// says where it came from.
func TestSentinelsNameTheirPackage(t *testing.T) {
	for _, err := range []error{lease.ErrNotLeader, lease.ErrRenewalFailed, lease.ErrClosed, lease.ErrStaleToken} {
		assert.Regexp(t, `^lease\b`, err.Error())
	}
	assert.Equal(t, "lease: not the leader", lease.ErrNotLeader.Error())
	assert.Equal(t, "lease: stale fencing token", lease.ErrStaleToken.Error())
}

func TestWithLeadershipPanicDoesNotLeak(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	before := goleak.IgnoreCurrent() // the renewer and the test's own
	assert.Panics(t, func() {
		_ = f.tr.WithLeadership(context.Background(), func(context.Context) error { panic("boom") })
	})
	goleak.VerifyNone(t, before) // the watcher is gone while the tracker lives on
}

// unsentClaims is a Store whose next claims (as many as left says) are
// not sent: they fail with an error matching leasestore.ErrNotSent, as a store
// that bounds its calls in flight answers a call whose ctx ended while it
// waited for a slot.
type unsentClaims struct {
	leasestore.Store
	left *atomic.Int32
}

func (s unsentClaims) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	if s.left.Add(-1) >= 0 {
		return leasestore.Grant{}, fmt.Errorf("claim %q: %w: %w", name, leasestore.ErrNotSent, context.DeadlineExceeded)
	}
	return s.Store.Claim(ctx, name, holder, d)
}

func TestUnsentClaimKeepsNotHeld(t *testing.T) {
	var unsent atomic.Int32
	f := newFixture(t, func(c *lease.Config) {
		c.Store = unsentClaims{Store: c.Store, left: &unsent}
	}, func(f *fixture) {
		_, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
		require.NoError(t, err)
	})
	want := lease.Status{State: lease.NotHeld, Holder: "unit-1"}
	require.Equal(t, want, f.next(t))

	// The next claim is not sent: nothing changed, so the answer stays
	// "not leader, held by unit-1" (an ambiguous claim would make it
	// Unknown), and the tracker claims again on the NotHeld schedule.
	unsent.Store(1)
	f.expectIdle(t, 3*time.Second)
	require.Equal(t, 3*time.Second, f.nextIdle(t), "after an unsent claim")
	assert.Equal(t, int32(0), unsent.Load(), "the unsent claim was made")
	st, err := f.check(t, dur)
	var nle *lease.NotLeaderError
	require.ErrorAs(t, err, &nle)
	assert.Equal(t, "unit-1", nle.Holder)
	assert.Equal(t, want, st)
	f.noChange(t, "an unsent claim published nothing")
}

// TestClaimIntervalIsItsOwnKnob: while another holder has the lease the
// tracker claims every ClaimInterval; after ambiguous failures it backs off
// from Duration/80 to Duration/10, whatever ClaimInterval is.
func TestClaimIntervalIsItsOwnKnob(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.ClaimInterval = 5 * time.Second },
		func(f *fixture) {
			_, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
			require.NoError(t, err)
		})
	require.Equal(t, lease.NotHeld, f.next(t).State)
	f.store.Next(leasetest.OpClaim, leasetest.Timeout)
	f.expectIdle(t, 5*time.Second) // after the claim unit-1 denied
	f.expectIdle(t, firstRetry)    // an ambiguous claim: the retry backoff
	require.Equal(t, 5*time.Second, f.nextIdle(t), "denied again: ClaimInterval")
}

// TestTrackerCountsItsCallsAsItsStoreDoes: a tracker's Report.Calls and
// its store's Report are one shape, and, for a tracker alone on a
// store, the same counts — claims denied, renewals, ambiguous and not-sent
// calls, a loss and the release — however its store answered.
func TestTrackerCountsItsCallsAsItsStoreDoes(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.ReleaseOnClose = true }, nil)
	f.held(t)
	step(t, f) // a renewal
	f.store.Next(leasetest.OpExtend, leasetest.Timeout)
	step(t, f) // an ambiguous renewal
	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	step(t, f) // a loss
	f.store.Next(leasetest.OpClaim, leasetest.NotSent)
	step(t, f) // an unsent claim
	f.store.Next(leasetest.OpClaim, leasetest.Timeout)
	step(t, f) // an ambiguous claim
	rep := step(t, f)
	require.Equal(t, lease.Held, rep.State)
	require.NoError(t, f.tr.Close()) // a release

	rep = f.tr.Report()
	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 2, NotSent: 1, Ambiguous: 1},
		Extend: leasestore.Calls{OK: 1, Definitive: 1, Ambiguous: 1},
		Revoke: leasestore.Calls{OK: 1},
	}, rep.Calls)
	assert.Equal(t, f.store.StoreReport(), rep.Calls, "the tracker counts as its store does")
	assert.Equal(t, rep.Calls.Extend.Definitive, rep.Losses)
	assert.Equal(t, rep.Calls.Claim.Definitive, rep.Denials)
}
