package lease_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
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

// gateClock is a testclock that can hold one call of Now until the test
// lets it go (arm), and tell the deadlines of the alarms armed meanwhile
// (record), so that a test can stop a goroutine at a chosen point and see
// what the renewer waits for.
type gateClock struct {
	*testclock.Clock
	mu      sync.Mutex
	left    int
	blocked chan struct{}
	release chan struct{}
	alarms  chan time.Time // deadlines of NewAlarm while recording; nil when not
}

func newGateClock(c *lease.Config) *gateClock {
	gc := &gateClock{Clock: c.Clock.(*testclock.Clock)}
	c.Clock = gc
	return gc
}

// arm makes the n-th call of Now from now on block until release closes;
// blocked closes when it does.
func (c *gateClock) arm(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left, c.blocked, c.release = n, make(chan struct{}), make(chan struct{})
}

// record starts sending the deadline of every alarm armed to alarms.
func (c *gateClock) record() <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alarms = make(chan time.Time, 100)
	return c.alarms
}

func (c *gateClock) Now() time.Time {
	c.mu.Lock()
	hit := false
	if c.left > 0 {
		c.left--
		hit = c.left == 0
	}
	blocked, release := c.blocked, c.release
	c.mu.Unlock()
	if hit {
		close(blocked)
		<-release
	}
	return c.Clock.Now()
}

func (c *gateClock) NewAlarm(t time.Time) clock.Alarm {
	c.mu.Lock()
	if c.alarms != nil {
		c.alarms <- t
	}
	c.mu.Unlock()
	return c.Clock.NewAlarm(t)
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("%s never came", what)
	}
	var zero T
	return zero
}

// requireSteppedDownFollower asserts that the tracker, stepped down,
// waits one Duration before it claims again, and has claimed only once.
func requireSteppedDownFollower(t *testing.T, f *fixture) {
	t.Helper()
	rep := settle(t, f)
	assert.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, f.clk.Now().Add(dur), rep.NextCall, "no claim for one Duration after the step-down")
	assert.Equal(t, uint64(1), rep.Calls.Claim.OK, "claimed again after the step-down")
}

// blockLog is a slog.Handler that blocks the record msg until release
// closes; entered closes when it arrives. The tracker logs a change before
// it publishes it.
type blockLog struct {
	msg              string
	entered, release chan struct{}
}

func (h blockLog) Enabled(context.Context, slog.Level) bool { return true }
func (h blockLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h blockLog) WithGroup(string) slog.Handler            { return h }

func (h blockLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		close(h.entered)
		<-h.release
	}
	return nil
}

// A Check that asks for a store call around a StepDown is answered by the
// step-down (NotHeld), and its request dies with it: the follower does
// not claim again at once, and the check does not wait for a call that
// never comes.
func TestStepDownAnswersConcurrentCheck(t *testing.T) {
	// The check asks while the renewer is about to publish NotHeld: its
	// request is pending when the step-down is published.
	t.Run("asked before NotHeld is published", func(t *testing.T) {
		h := blockLog{msg: "lease stepped down", entered: make(chan struct{}), release: make(chan struct{})}
		f := newFixture(t, func(c *lease.Config) { c.Logger = slog.New(h) }, nil)
		f.held(t)
		settle(t, f)
		f.clk.Advance(28 * time.Second) // 29 s left: a Check for dur asks for a call
		stepped := make(chan error, 1)
		go func() { stepped <- f.tr.StepDown(context.Background()) }()
		recv(t, h.entered, "the step-down")
		answers := f.checkWaiting(t, dur)
		close(h.release)
		a := recv(t, answers, "the check's answer")
		require.ErrorIs(t, a.err, lease.ErrNotLeader)
		assert.Equal(t, lease.NotHeld, a.st.State)
		require.NoError(t, recv(t, stepped, "StepDown"))
		requireSteppedDownFollower(t, f)
	})
	// The check read Held, then NotHeld was published before it asked.
	t.Run("asked after NotHeld is published", func(t *testing.T) {
		var gc *gateClock
		f := newFixture(t, func(c *lease.Config) { gc = newGateClock(c) }, nil)
		f.held(t)
		settle(t, f)
		f.clk.Advance(28 * time.Second)
		gc.arm(2) // Check's Now, then check's, after it read the snapshot
		answers := make(chan answer, 1)
		go func() {
			st, err := f.check(t, dur)
			answers <- answer{st, err}
		}()
		recv(t, gc.blocked, "the check")
		require.NoError(t, f.tr.StepDown(context.Background()))
		close(gc.release)
		a := recv(t, answers, "the check's answer")
		require.ErrorIs(t, a.err, lease.ErrNotLeader)
		assert.Equal(t, lease.NotHeld, a.st.State)
		requireSteppedDownFollower(t, f)
	})
}

// Close while StepDown waits for a Lead function does not release under
// it: the release still waits for fn, then Close and StepDown return.
func TestCloseDuringStepDownStillWaitsForFn(t *testing.T) {
	var running atomic.Int32
	var order *revokeOrder
	f := newFixture(t, func(c *lease.Config) {
		order = &revokeOrder{Store: c.Store, running: &running}
		c.Store = order
	}, nil)
	f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	running.Store(1)
	stepped := make(chan error, 1)
	go func() { stepped <- f.tr.StepDown(context.Background()) }()
	require.ErrorIs(t, r.ended(t), lease.ErrNotLeader) // fn told to stop; it still drains
	closed := make(chan error, 1)
	go func() { closed <- f.tr.Close() }()
	// The closed status is published after a release the step-down makes
	// at once, and before one that waits for fn.
	for {
		_, changed := f.tr.Current()
		if f.tr.Report().Closed {
			break
		}
		recv(t, changed, "the closed status")
	}
	assert.False(t, order.revokedWhileLeader.Load(), "released while fn still ran")
	holder, err := f.mem.Holder(context.Background(), "singular")
	require.NoError(t, err, "the lease is still held while fn runs")
	assert.Equal(t, "unit-0", holder.Holder)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while fn ran", err)
	case err := <-stepped:
		t.Fatalf("StepDown returned (%v) while fn ran", err)
	default:
	}
	running.Store(0)
	r.ret <- nil
	require.NoError(t, recv(t, closed, "Close"))
	require.NoError(t, recv(t, stepped, "StepDown"))
	assert.Equal(t, int32(1), order.revokes.Load(), "released once")
	_, err = f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released after fn returned")
}

// A StepDown that lands while Lead is starting fn (its promise checked,
// fn not yet called) waits for fn like any other: fn starts on a lease
// still held and the release comes after it returns.
func TestStepDownWhileLeadStartsFnWaitsForIt(t *testing.T) {
	var running atomic.Int32
	var order *revokeOrder
	var gc *gateClock
	f := newFixture(t, func(c *lease.Config) {
		gc = newGateClock(c)
		order = &revokeOrder{Store: c.Store, running: &running}
		c.Store = order
	}, nil)
	first := f.held(t)
	settle(t, f)
	gc.arm(2) // awaitHeld's Now, then the promise's: Lead about to start fn
	type start struct {
		ctx    context.Context
		holder leasestore.Grant
		err    error
	}
	starts := make(chan start, 1)
	ret := make(chan struct{})
	finish := sync.OnceFunc(func() { close(ret) })
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan error, 1)
	go func() {
		led <- f.tr.Lead(ctx, func(lctx context.Context, _ lease.Status) error {
			running.Store(1)
			defer running.Store(0)
			g, err := f.mem.Holder(context.Background(), "singular")
			starts <- start{lctx, g, err}
			<-ret
			return nil
		})
	}()
	recv(t, gc.blocked, "Lead starting fn")
	letGo := sync.OnceFunc(func() { close(gc.release) })
	t.Cleanup(func() { // whatever failed
		letGo()
		finish()
		cancel()
		<-led
	})
	alarms := gc.record()
	stepped := make(chan error, 1)
	go func() { stepped <- f.tr.StepDown(context.Background()) }()
	f.nextState(t, lease.NotHeld)
	// The renewer's next alarm says what it waits for: the promise's
	// Until, for fn; not its next claim, one Duration on, after releasing.
	assert.Equal(t, first.Until, recv(t, alarms, "the renewer's alarm"), "the renewer does not wait for fn")
	letGo()
	st := recv(t, starts, "fn's start")
	require.NoError(t, st.err, "fn started on a released lease")
	assert.Equal(t, "unit-0", st.holder.Holder)
	recv(t, st.ctx.Done(), "the end of fn's ctx")
	require.ErrorIs(t, context.Cause(st.ctx), lease.ErrNotLeader)
	select {
	case err := <-stepped:
		t.Fatalf("StepDown returned (%v) while fn ran", err)
	default:
	}
	finish()
	require.NoError(t, recv(t, stepped, "StepDown"))
	assert.False(t, order.revokedWhileLeader.Load())
	_, err := f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released after fn returned")
}

// StepDown called from a Lead function with its ctx returns once NotHeld
// is published — it cannot wait for the release, which waits for the
// function — and the release follows when the function returns.
func TestStepDownFromLeadFn(t *testing.T) {
	var running atomic.Int32
	var order *revokeOrder
	f := newFixture(t, func(c *lease.Config) {
		order = &revokeOrder{Store: c.Store, running: &running}
		c.Store = order
	}, nil)
	f.held(t)
	settle(t, f)
	stepped := make(chan error, 1)
	causes := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int32
	led := make(chan error, 1)
	go func() {
		led <- f.tr.Lead(ctx, func(lctx context.Context, _ lease.Status) error {
			runs.Add(1)
			running.Store(1)
			defer running.Store(0)
			stepped <- f.tr.StepDown(lctx)
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return lctx.Err()
		})
	}()
	require.NoError(t, recv(t, stepped, "StepDown from fn"), "StepDown from fn, the clock unmoved")
	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.Equal(t, lease.NotHeld, st.State)
	assert.ErrorContains(t, recv(t, causes, "fn's ctx ending"), "stepped down")
	requireSteppedDownFollower(t, f) // released, then waiting one Duration
	assert.False(t, order.revokedWhileLeader.Load(), "released while fn ran")
	_, err = f.mem.Holder(context.Background(), "singular")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "released")
	assert.Equal(t, int32(1), runs.Load())
	cancel()
	require.ErrorIs(t, recv(t, led, "Lead"), context.Canceled)
}

// Report never says Held past the promise, even while the renewer is
// stuck in a store call that ignores its ctx and has not published the
// drop to Unknown: it says what Check says.
func TestReportNotHeldPastUntil(t *testing.T) {
	ws := &wedgedStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixture(t, func(c *lease.Config) {
		ws.Store = c.Store
		c.Store = ws
	}, nil)
	t.Cleanup(func() { close(ws.release) })
	first := f.held(t)
	f.expectIdle(t, renewAt)
	recv(t, ws.entered, "the wedged extend")
	rep := f.tr.Report()
	assert.Equal(t, lease.Held, rep.State, "before Until")
	f.clk.Advance(first.Until.Sub(f.clk.Now()) + time.Second)
	rep = f.tr.Report()
	assert.Equal(t, lease.Unknown, rep.State, "a second past Until")
	assert.Empty(t, rep.Holder)
	require.ErrorIs(t, rep.Err, lease.ErrRenewalFailed)
	assert.Equal(t, first.Until, rep.Since)
	assert.Equal(t, time.Second, rep.UnknownFor)
	// Check joins the wedged call, and answers from the cache when its
	// ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	st, _ := f.tr.Check(ctx, 0)
	assert.Equal(t, st.State, rep.State, "as Check says")
}

// A follower's denied claims are Denials, not Losses: Losses counts terms
// this tracker held and lost.
func TestReportDenialsAreNotLosses(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) {
		_, err := f.mem.Claim(context.Background(), "singular", "unit-1", 10*dur)
		require.NoError(t, err)
	})
	for range 3 {
		step(t, f)
	}
	rep := settle(t, f)
	assert.Equal(t, lease.NotHeld, rep.State)
	assert.Equal(t, uint64(4), rep.Denials)
	assert.Zero(t, rep.Losses)
}

func TestConfigValidateSaysZeroIsTheDefault(t *testing.T) {
	valid := lease.Config{Name: "n", Holder: "h", Duration: dur}
	for name, mod := range map[string]func(*lease.Config){
		"ClaimInterval": func(c *lease.Config) { c.ClaimInterval = -1 },
		"Margin":        func(c *lease.Config) { c.Margin = -1 },
		"RenewFraction": func(c *lease.Config) { c.RenewFraction = 1e-12 },
	} {
		cfg := valid
		mod(&cfg)
		assert.ErrorContains(t, cfg.Validate(), "0 for the default", name)
	}
}

// Settle, while a StepDown waits for a Lead function, says so.
func TestSettleSaysStepDownWaitsForFn(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.held(t)
	l := startLead(t, f.tr)
	r := l.next(t)
	stepped := make(chan error, 1)
	go func() { stepped <- f.tr.StepDown(context.Background()) }()
	r.ended(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := leasetest.Settle(ctx, f.tr, f.clk, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "waits for Lead functions")
	assert.NotContains(t, err.Error(), "of 0")
	r.ret <- nil
	require.NoError(t, recv(t, stepped, "StepDown"))
}
