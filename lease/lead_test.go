package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// leaderRun is one run of a Lead function: its ctx and status, and the
// channel on which the test tells it what to return.
type leaderRun struct {
	ctx context.Context
	st  lease.Status
	ret chan error
}

// leading is a Lead running in the background on f's tracker; each run of
// its fn is reported on runs and returns what the test sends on its ret.
type leading struct {
	runs   chan leaderRun
	done   chan error
	cancel context.CancelFunc

	mu      sync.Mutex
	started []leaderRun // every run, so that the cleanup can end them
}

func startLead(t *testing.T, tr *lease.Tracker) *leading {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &leading{runs: make(chan leaderRun), done: make(chan error, 1), cancel: cancel}
	go func() {
		l.done <- tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
			r := leaderRun{ctx: ctx, st: st, ret: make(chan error, 1)}
			l.mu.Lock()
			l.started = append(l.started, r)
			l.mu.Unlock()
			select {
			case l.runs <- r:
			case <-ctx.Done():
				return ctx.Err()
			}
			return <-r.ret
		})
	}()
	t.Cleanup(func() {
		cancel()
		l.mu.Lock()
		for _, r := range l.started {
			select {
			case r.ret <- nil: // a run the test left running
			default:
			}
		}
		l.mu.Unlock()
		<-l.done
	})
	return l
}

// next waits for the next run of fn.
func (l *leading) next(t *testing.T) leaderRun {
	t.Helper()
	select {
	case r := <-l.runs:
		return r
	case err := <-l.done:
		l.done <- err // for the cleanup
		t.Fatalf("Lead returned %v instead of running fn", err)
	case <-time.After(wait):
		t.Fatal("Lead never ran fn")
	}
	return leaderRun{}
}

// result waits for Lead to return.
func (l *leading) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.done:
		l.done <- err // for the cleanup
		return err
	case r := <-l.runs:
		t.Fatalf("Lead ran fn again (%+v) instead of returning", r.st)
	case <-time.After(wait):
		t.Fatal("Lead never returned")
	}
	return nil
}

// ended waits for the run's ctx to end and returns its cause.
func (r leaderRun) ended(t *testing.T) error {
	t.Helper()
	select {
	case <-r.ctx.Done():
		return context.Cause(r.ctx)
	case <-time.After(wait):
		t.Fatal("fn's ctx never ended")
		return nil
	}
}

func settle(t *testing.T, f *fixture) lease.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := leasetest.Settle(ctx, f.tr, f.clk, 0)
	require.NoError(t, err)
	return r
}

func step(t *testing.T, f *fixture) lease.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := leasetest.Step(ctx, f.tr, f.clk)
	require.NoError(t, err)
	return r
}

func TestLeadEndsOnDefinitiveLossAndRunsAgainOnNextTerm(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	assert.Equal(t, first, r.st, "fn gets the status it leads under")
	require.NoError(t, r.ctx.Err())

	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	f.expectIdle(t, renewAt)
	cause := r.ended(t)
	require.ErrorIs(t, cause, lease.ErrNotLeader)
	assert.NotErrorIs(t, cause, lease.ErrRenewalFailed)
	r.ret <- r.ctx.Err() // an error caused by the leadership ctx: Lead goes on

	f.expectIdle(t, firstRetry) // the lease is free: a new term
	again := l.next(t)
	assert.Greater(t, again.st.Token, first.Token)
	require.NoError(t, again.ctx.Err())
	l.cancel()
	again.ended(t)
	again.ret <- context.Cause(again.ctx)
	require.ErrorIs(t, l.result(t), context.Canceled, "Lead returns ctx.Err() when its ctx ends")
}

// The founding incident, for leader work: renewals fail ambiguously, and
// fn's ctx must not end while the promise stands — and must end no later
// than the promised Until.
func TestLeadAmbiguousFailureEndsFnOnlyAtUntil(t *testing.T) {
	// Margin 4s: the promise ends at t0+56s, so the retry after it (3 s,
	// Duration/10) reaches the store before the term ends (t0+60s).
	f := newFixture(t, func(c *lease.Config) { c.Margin = 4 * time.Second }, nil)
	first := f.next(t)
	require.Equal(t, lease.Status{State: lease.Held, Holder: "unit-0", Until: t0.Add(56 * time.Second), Token: first.Token}, first)
	l := startLead(t, f.tr)
	r := l.next(t)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	for {
		rep := settle(t, f)
		if !f.clk.Now().Before(first.Until) {
			break
		}
		require.NoError(t, r.ctx.Err(), "fn's ctx ended at %v, before Until %v, on an ambiguous failure",
			f.clk.Now(), first.Until)
		require.False(t, rep.NextCall.After(first.Until), "the renewer sleeps past Until, to %v", rep.NextCall)
		step(t, f)
	}
	cause := r.ended(t)
	assert.Equal(t, first.Until, f.clk.Now(), "the clock never went past Until: fn's ctx ended no later")
	require.ErrorIs(t, cause, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, cause, lease.ErrNotLeader)
	r.ret <- nil

	// The store recovers: the same term is confirmed, and fn runs again.
	f.store.Always(leasetest.OpExtend, leasetest.Pass)
	step(t, f)
	again := l.next(t)
	assert.Equal(t, first.Token, again.st.Token, "the same term, led again")
	again.ret <- nil
}

func TestLeadReturnsErrClosedOnClose(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	require.ErrorIs(t, r.ended(t), lease.ErrClosed)
	r.ret <- r.ctx.Err()
	require.ErrorIs(t, l.result(t), lease.ErrClosed)
	require.NoError(t, <-closed)
}

func TestLeadReturnsFnsOwnError(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	boom := errors.New("boom")
	r.ret <- boom
	assert.Same(t, boom, l.result(t), "fn's own error, as is")
}

func TestLeadDoesNotRerunFnWithinOneLeadership(t *testing.T) {
	f := newNotifyingFixture(t, nil, nil)
	first := f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	r.ret <- nil // done early: no rerun while this leadership lasts
	f.expectIdle(t, renewAt)
	f.expectIdle(t, renewAt)
	select {
	case r := <-l.runs:
		t.Fatalf("fn ran again within the same leadership: %+v", r.st)
	default:
	}
	// The renewal the clock just fired has been answered: the revoke
	// below must not race it (a renewal sent after it would find the term
	// over by itself, one sent before it would confirm the term).
	require.Equal(t, renewAt, f.nextIdle(t), "the renewer's wait after the renewal")
	// The term ends (revoked behind our back) and a new one begins.
	require.NoError(t, f.mem.Revoke(context.Background(),
		leasestore.Grant{Name: "singular", Holder: "unit-0", Token: first.Token}))
	f.expectIdle(t, firstRetry)
	again := l.next(t)
	assert.Greater(t, again.st.Token, first.Token)
	again.ret <- nil
}

func TestLeadWaitsForHeldAndEndsWithCtx(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) {
		_, err := f.mem.Claim(context.Background(), "singular", "unit-1", dur)
		require.NoError(t, err)
	})
	require.Equal(t, lease.NotHeld, f.next(t).State)
	l := startLead(t, f.tr)
	f.expectIdle(t, 3*time.Second) // still held by unit-1
	l.cancel()
	require.ErrorIs(t, l.result(t), context.Canceled)
}

// revokeOrder wraps a Store and records, at each Revoke, whether a Lead
// function was still running.
type revokeOrder struct {
	leasestore.Store
	running            *atomic.Int32
	revokes            atomic.Int32
	revokedWhileLeader atomic.Bool
}

func (s *revokeOrder) Revoke(ctx context.Context, g leasestore.Grant) error {
	s.revokes.Add(1)
	if s.running.Load() > 0 {
		s.revokedWhileLeader.Store(true)
	}
	return s.Store.Revoke(ctx, g)
}

// TestCloseReleasesOnlyAfterLeadFnReturned: hand-over must not let a
// successor start while this process still does leader work
// (controller-runtime#1132): the revoke comes after fn returned.
func TestCloseReleasesOnlyAfterLeadFnReturned(t *testing.T) {
	var running atomic.Int32
	var order *revokeOrder
	f := newFixture(t, func(c *lease.Config) {
		c.ReleaseOnClose = true
		order = &revokeOrder{Store: c.Store, running: &running}
		c.Store = order
	}, nil)
	f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	running.Store(1)
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	require.ErrorIs(t, r.ended(t), lease.ErrClosed)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while fn ran", err)
	default:
	}
	running.Store(0)
	r.ret <- nil
	require.NoError(t, <-closed)
	assert.Equal(t, int32(1), order.revokes.Load())
	assert.False(t, order.revokedWhileLeader.Load(), "revoked while fn still ran")
	_, err := f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released")
}

// TestCloseReleaseWaitsNoLongerThanThePromise: fn that ignores its ctx
// holds back the release only until Until.
func TestCloseReleaseWaitsNoLongerThanThePromise(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.ReleaseOnClose = true }, nil)
	first := f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	r.ended(t)
	f.clk.Advance(first.Until.Sub(f.clk.Now()))
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Close waited past the promise for fn")
	}
	_, err := f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released once the promise ran out")
	r.ret <- nil
}

func TestStepDownReleasesAfterFnAndStaysFollower(t *testing.T) {
	var running atomic.Int32
	var order *revokeOrder
	f := newFixture(t, func(c *lease.Config) {
		order = &revokeOrder{Store: c.Store, running: &running}
		c.Store = order
	}, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	l := startLead(t, f.tr)
	r := l.next(t)
	running.Store(1)
	stepped := make(chan error, 1)
	go func() { stepped <- f.tr.StepDown(context.Background()) }()

	cause := r.ended(t)
	require.ErrorIs(t, cause, lease.ErrNotLeader)
	assert.ErrorContains(t, cause, "stepped down")
	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrNotLeader, "not leader at once")
	assert.Equal(t, lease.NotHeld, st.State)
	select {
	case err := <-stepped:
		t.Fatalf("StepDown returned (%v) while fn ran", err)
	default:
	}
	running.Store(0)
	r.ret <- nil
	require.NoError(t, <-stepped)
	assert.False(t, order.revokedWhileLeader.Load(), "released while fn still ran")
	_, err = f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released")

	// A successor takes over; this tracker stays a follower and does not
	// claim for one Duration, then reports the new holder.
	other, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
	require.NoError(t, err)
	assert.Equal(t, dur, f.nextIdle(t), "no claim for one Duration")
	f.clk.Advance(dur)
	rep := settle(t, f)
	assert.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, "unit-1", rep.Holder, "the follower names the new holder: %+v at %v", rep, f.clk.Now())
	assert.Greater(t, other.Token, first.Token)
	select {
	case r := <-l.runs:
		t.Fatalf("fn ran again after the step-down: %+v", r.st)
	default:
	}
	assert.Equal(t, uint64(1), rep.Calls.Claim.OK, "one claim granted, the first")
}

func TestStepDownAfterCloseIsErrClosed(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	require.NoError(t, f.tr.Close())
	require.ErrorIs(t, f.tr.StepDown(context.Background()), lease.ErrClosed)
}

func TestWithLeadershipRunsWithLiveCtxFromCachedHeld(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	f.clk.Advance(time.Second) // answered from cache, not just after the claim
	var live bool
	err := f.tr.WithLeadership(context.Background(), func(ctx context.Context) error {
		live = ctx.Err() == nil
		return nil
	})
	require.NoError(t, err)
	assert.True(t, live, "fn's ctx was already cancelled")
}

// TestCurrentManyFollowers: 20 goroutines follow one tracker through Held →
// Unknown → Held → NotHeld, one of them stalled throughout; each fast one
// sees every state, the stalled one the latest only, and nobody blocks the
// renewer.
func TestCurrentManyFollowers(t *testing.T) {
	// Margin 4s: the promise ends at t0+56s, so the retry after it (3 s,
	// Duration/10) reaches the store before the term ends (t0+60s).
	f := newFixture(t, func(c *lease.Config) { c.Margin = 4 * time.Second }, nil)
	require.Equal(t, lease.Held, f.next(t).State)
	const fast = 19
	type seen struct {
		reader int
		state  lease.State
	}
	seenCh := make(chan seen, 100)
	var wg sync.WaitGroup
	for i := range fast {
		wg.Go(func() {
			last := lease.State(-1)
			for {
				st, changed := f.tr.Current()
				if st.State != last {
					last = st.State
					seenCh <- seen{i, st.State}
				}
				if st.State == lease.NotHeld {
					return
				}
				select {
				case <-changed:
				case <-time.After(wait):
					t.Errorf("reader %d: no change after %v", i, st)
					return
				}
			}
		})
	}
	stalled := make(chan struct{})
	slowDone := make(chan lease.Status, 1)
	wg.Go(func() {
		_, changed := f.tr.Current()
		<-stalled // a follower that does not read while everything happens
		<-changed // closed long ago: no wait
		st, _ := f.tr.Current()
		slowDone <- st
	})
	awaitAll := func(s lease.State) {
		t.Helper()
		got := map[int]bool{}
		for len(got) < fast {
			select {
			case x := <-seenCh:
				require.Equal(t, s, x.state, "reader %d at %v: %+v", x.reader, f.clk.Now(), f.tr.Report())
				got[x.reader] = true
			case <-time.After(wait):
				t.Fatalf("%d of %d readers saw %v", len(got), fast, s)
			}
		}
	}
	awaitAll(lease.Held)

	f.store.Always(leasetest.OpExtend, leasetest.Timeout)
	for settle(t, f).State != lease.Unknown {
		step(t, f)
	}
	awaitAll(lease.Unknown)
	f.store.Always(leasetest.OpExtend, leasetest.Pass)
	for settle(t, f).State != lease.Held {
		step(t, f)
	}
	awaitAll(lease.Held)
	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	for settle(t, f).State != lease.NotHeld {
		step(t, f)
	}
	awaitAll(lease.NotHeld)
	close(stalled)
	wg.Wait()
	assert.Equal(t, lease.NotHeld, (<-slowDone).State, "the stalled follower sees the latest status")
}

func TestReportCounts(t *testing.T) {
	var unsent atomic.Int32
	f := newFixture(t, func(c *lease.Config) {
		c.Store = unsentClaims{Store: c.Store, left: &unsent}
	}, nil)
	f.held(t)
	rep := settle(t, f)
	assert.Equal(t, lease.Held, rep.State)
	assert.Equal(t, "singular", rep.Name)
	assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{OK: 1}}, rep.Calls)
	assert.Equal(t, uint64(1), rep.Transitions, "Unknown → Held")
	assert.Equal(t, t0.Add(renewAt), rep.NextCall)
	assert.Zero(t, rep.UnknownFor, "the claim was answered at once")

	step(t, f) // a renewal
	f.store.Next(leasetest.OpExtend, leasetest.Timeout)
	step(t, f) // an ambiguous renewal
	rep = step(t, f)
	assert.Equal(t, leasestore.Calls{OK: 2, Ambiguous: 1}, rep.Calls.Extend)
	assert.Equal(t, lease.Held, rep.State)

	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	rep = step(t, f)
	assert.Equal(t, uint64(1), rep.Losses)
	assert.Equal(t, rep.Calls.Extend.Definitive, rep.Losses)
	assert.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, uint64(2), rep.Transitions)

	unsent.Store(1)
	rep = step(t, f) // an unsent claim
	assert.Equal(t, uint64(1), rep.Calls.Claim.NotSent)
	f.store.Next(leasetest.OpClaim, leasetest.Timeout)
	rep = step(t, f) // an ambiguous claim: Unknown
	assert.Equal(t, lease.Unknown, rep.State)
	f.store.SetLatency(time.Second, 0)
	f.clk.Advance(rep.NextCall.Sub(f.clk.Now()))
	f.waitBlocked(t)
	assert.Equal(t, time.Duration(0), f.tr.Report().InCall, "in flight since now")
	f.clk.Advance(time.Second)
	rep = settle(t, f)
	assert.Equal(t, lease.Held, rep.State)
	assert.Equal(t, time.Second, rep.LastCall, "the last call's latency")
	assert.Equal(t, f.clk.Now(), rep.LastCallEnd)
	assert.Equal(t, firstRetry+time.Second, rep.UnknownFor,
		"Unknown from the ambiguous claim to the confirmation")
	assert.Equal(t, uint64(4), rep.Transitions)
	assert.Equal(t, leasestore.Report{ // 8 calls, 2 of them ambiguous
		Claim:  leasestore.Calls{OK: 2, NotSent: 1, Ambiguous: 1},
		Extend: leasestore.Calls{OK: 2, Definitive: 1, Ambiguous: 1},
	}, rep.Calls)
}

// Report's Token is the term last confirmed, as its doc (and the token
// gauge, and the close record) says: it names this tracker's last term
// after that term is over — a loss, a step-down, Close — while Check's
// Status, which says NotHeld, carries none.
func TestReportKeepsTheLastTermAfterItEnds(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	require.Equal(t, first.Token, settle(t, f).Token)

	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	rep := step(t, f)
	require.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, first.Token, rep.Token, "after a loss")
	st, _ := f.tr.Current()
	assert.Zero(t, st.Token, "the status says NotHeld, with no term")

	rep = step(t, f) // claims again: a new term
	require.Equal(t, lease.Held, rep.State)
	second := rep.Token
	require.Greater(t, second, first.Token)

	require.NoError(t, f.tr.StepDown(context.Background()))
	assert.Equal(t, second, f.tr.Report().Token, "after a step-down")

	require.NoError(t, f.tr.Close())
	rep = f.tr.Report()
	require.True(t, rep.Closed)
	assert.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, second, rep.Token, "after Close")
}

// TestAliveThroughStoreOutage: a store that hangs every call, or times
// out, is not the tracker being stuck; neither is another holder leading.
func TestAliveThroughStoreOutage(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Always(leasetest.OpExtend|leasetest.OpClaim, leasetest.Hang)
	f.expectIdle(t, renewAt)
	for i := range 20 {
		f.waitBlocked(t)
		require.NoError(t, f.tr.Alive(), "call %d in flight", i)
		cut := callTimeout // or the end of the validity, while Held
		if r := f.tr.Report(); r.State == lease.Held && r.Until.Sub(f.clk.Now()) < cut {
			cut = r.Until.Sub(f.clk.Now())
		}
		f.clk.Advance(cut - time.Millisecond)
		require.NoError(t, f.tr.Alive(), "call %d about to be cut off", i)
		f.clk.Advance(time.Millisecond)
		rep := settle(t, f)
		require.NoError(t, f.tr.Alive(), "call %d cut off", i)
		f.clk.Advance(rep.NextCall.Sub(f.clk.Now()))
	}
	assert.Equal(t, lease.Unknown, f.tr.Report().State)

	// Another holder leads: still alive.
	f.waitBlocked(t)
	f.store.Always(leasetest.OpExtend|leasetest.OpClaim, leasetest.Pass)
	f.clk.Advance(callTimeout)
	settle(t, f)
	_ = f.mem.Revoke(context.Background(), leasestore.Grant{Name: "singular", Holder: "unit-0", Token: first.Token})
	_, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
	require.NoError(t, err)
	for settle(t, f).State != lease.NotHeld {
		step(t, f)
	}
	require.NoError(t, f.tr.Alive())
}

// wedgedStore is a Store whose Extend ignores its ctx and never returns
// until released.
type wedgedStore struct {
	leasestore.Store
	entered chan struct{}
	release chan struct{}
}

func (s *wedgedStore) Extend(context.Context, leasestore.Grant, time.Duration) (leasestore.Grant, error) {
	s.entered <- struct{}{}
	<-s.release
	return leasestore.Grant{}, errors.New("wedged")
}

func TestAliveFailsWhenRenewerWedged(t *testing.T) {
	ws := &wedgedStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixture(t, func(c *lease.Config) {
		ws.Store = c.Store
		c.Store = ws
	}, nil)
	t.Cleanup(func() { close(ws.release) }) // before the fixture's Close
	f.held(t)
	f.expectIdle(t, renewAt)
	select {
	case <-ws.entered:
	case <-time.After(wait):
		t.Fatal("the renewal never started")
	}
	f.clk.Advance(2 * callTimeout)
	require.NoError(t, f.tr.Alive(), "twice the call timeout: not yet")
	f.clk.Advance(time.Millisecond)
	err := f.tr.Alive()
	require.Error(t, err, "a store call in flight for more than twice the call timeout")
	assert.ErrorContains(t, err, "stuck")
	assert.Equal(t, 2*callTimeout+time.Millisecond, f.tr.Report().InCall)
}

func TestCallTimeoutIsNamed(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	f.store.Next(leasetest.OpExtend, leasetest.Hang)
	_, changed := f.tr.Current()
	f.expectIdle(t, renewAt)
	f.waitBlocked(t)
	f.clk.Advance(callTimeout)
	rep := settle(t, f)
	require.Equal(t, lease.Held, rep.State)
	select {
	case <-changed:
		t.Fatal("Current's channel closed for an ambiguous failure that changed no status")
	default:
	}
	err := rep.Err
	assert.ErrorContains(t, err, "lease call timeout 7.5s", "says what cut the call off")
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	// A check that needs the store now: its answer says the same.
	f.store.Next(leasetest.OpExtend, leasetest.Hang)
	answer := f.checkWaiting(t, dur)
	f.waitBlocked(t)
	f.clk.Advance(callTimeout)
	a := <-answer
	requireRenewalFailedHeld(t, a.st, a.err, first.Until)
	assert.ErrorContains(t, a.err, "lease call timeout 7.5s")
	assert.NotContains(t, a.err.Error(), "waiting for the store")
}

func TestFirstClaimNeverConfirmedSaysSo(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) {
		f.store.Next(leasetest.OpClaim, leasetest.Hang)
	})
	f.waitBlocked(t)
	f.store.Next(leasetest.OpClaim, leasetest.Hang)
	answer := f.checkWaiting(t, 0)
	f.clk.Advance(callTimeout)
	a := <-answer // the check joined the first claim
	require.ErrorIs(t, a.err, lease.ErrRenewalFailed)
	assert.NotErrorIs(t, a.err, lease.ErrNotLeader)
	assert.Equal(t, lease.Unknown, a.st.State)
	assert.ErrorContains(t, a.err, "claim not confirmed")
	assert.ErrorContains(t, a.err, "lease call timeout 7.5s")
	assert.ErrorContains(t, settle(t, f).Err, "claim not confirmed")
}

// TestFirstNotLeaderAfterLossNamesNewHolder: the first ErrNotLeader after a
// takeover names who holds the lease now (MemStore's NotHeldError).
func TestFirstNotLeaderAfterLossNamesNewHolder(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.held(t)
	require.NoError(t, f.mem.Revoke(context.Background(),
		leasestore.Grant{Name: "singular", Holder: "unit-0", Token: first.Token}))
	_, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
	require.NoError(t, err)
	f.expectIdle(t, renewAt)
	f.nextIdle(t)
	st, err := f.check(t, 0)
	var nle *lease.NotLeaderError
	require.ErrorAs(t, err, &nle)
	assert.Equal(t, "unit-1", nle.Holder)
	assert.Equal(t, "unit-1", st.Holder)
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "the extend's answer, not a later claim's")
}

func TestTokenGuard(t *testing.T) {
	var g lease.TokenGuard
	require.NoError(t, g.Admit(3))
	require.NoError(t, g.Admit(3), "the same term again")
	require.NoError(t, g.Admit(5))
	err := g.Admit(4)
	require.ErrorIs(t, err, lease.ErrStaleToken)
	var se *lease.StaleTokenError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, lease.StaleTokenError{Token: 4, Newest: 5}, *se)

	// Concurrent admits (under -race): the guard ends at the newest.
	var g2 lease.TokenGuard
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for tok := uint64(i); tok < 1000; tok += 8 {
				_ = g2.Admit(tok)
			}
		})
	}
	wg.Wait()
	require.ErrorIs(t, g2.Admit(998), lease.ErrStaleToken)
	require.NoError(t, g2.Admit(999))
}

func TestCheckFastPathWithFollowersDoesNotAllocate(t *testing.T) {
	f := newFixture(t, nil, nil)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	for range 20 {
		wg.Go(func() {
			for {
				_, changed := f.tr.Current()
				select {
				case <-changed:
				case <-done:
					return
				}
			}
		})
	}
	assertCheckDoesNotAllocate(t, f)
}
