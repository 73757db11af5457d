package gate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
)

// chanWaiter is a Waiter that is not a *Lock, as a user might write.
type chanWaiter chan struct{}

func (c chanWaiter) Unlocked() <-chan struct{} { return c }
func (c chanWaiter) IsUnlocked() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// bounded is the ctx for waits that must end by themselves: a regression
// (a waiter never released) fails the test after 10s instead of hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv returns what errc delivers, failing the test after 10s instead of
// hanging it when a regression never releases the sender.
func recv(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("still blocked after 10s")
		return nil
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestNewIsLocked(t *testing.T) {
	l := gate.New("api-port")
	assert.Equal(t, "api-port", l.Name())
	assert.False(t, l.IsUnlocked())
	assert.False(t, isClosed(l.Unlocked()))
	assert.False(t, isClosed(l.Done()))
	assert.NoError(t, l.Err())
	assert.Equal(t, "api-port (locked)", l.String())
}

func TestUnlockIsIdempotent(t *testing.T) {
	l := gate.New("g")
	l.Unlock()
	l.Unlock()
	assert.True(t, l.IsUnlocked())
	assert.True(t, isClosed(l.Unlocked()))
	assert.True(t, isClosed(l.Done()))
	assert.NoError(t, l.Err())
	assert.NoError(t, gate.Wait(bounded(t), l))
}

func TestFailReleasesWaitersWithCause(t *testing.T) {
	cause := errors.New("mongo not in replica set")
	l := gate.New("state")
	errc := make(chan error)
	go func() { errc <- gate.Wait(bounded(t), l) }()
	l.Fail(cause)
	err := recv(t, errc)
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, gate.ErrFailed)
	var fe *gate.FailedError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "state", fe.Name)
	assert.EqualError(t, err, `gate "state" failed: mongo not in replica set`)
	assert.False(t, l.IsUnlocked())
	assert.False(t, isClosed(l.Unlocked()), "a failed gate never closes Unlocked")
	assert.True(t, isClosed(l.Done()))
}

func TestFirstOfUnlockAndFailWins(t *testing.T) {
	t.Run("unlock then fail", func(t *testing.T) {
		l := gate.New("g")
		l.Unlock()
		l.Fail(errors.New("late"))
		assert.True(t, l.IsUnlocked())
		assert.NoError(t, l.Err())
	})
	t.Run("fail then unlock", func(t *testing.T) {
		cause := errors.New("first")
		l := gate.New("g")
		l.Fail(cause)
		l.Unlock()
		l.Fail(errors.New("second"))
		assert.False(t, l.IsUnlocked())
		assert.ErrorIs(t, l.Err(), cause)
	})
}

func TestFailNilFailsWithErrFailed(t *testing.T) {
	l := gate.New("g")
	l.Fail(nil)
	require.Error(t, l.Err())
	assert.EqualError(t, l.Err(), `gate "g" failed: no cause given`)
	assert.Equal(t, "g (failed: no cause given)", l.String())
	assert.ErrorIs(t, l.Err(), gate.ErrFailed)
	assert.ErrorIs(t, gate.Wait(bounded(t), l), gate.ErrFailed)
}

func TestWaitReturnsCtxErr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, gate.Wait(ctx, gate.New("g")), context.Canceled)
	assert.ErrorIs(t, gate.Wait(ctx, chanWaiter(make(chan struct{}))), context.Canceled)

	ctx, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	assert.ErrorIs(t, gate.Wait(ctx, gate.New("g")), context.DeadlineExceeded)
}

func TestWaitOpenGateWinsOverEndedCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := gate.New("g")
	l.Unlock()
	assert.NoError(t, gate.Wait(ctx, l))
	assert.NoError(t, gate.Wait(ctx, gate.AlreadyUnlocked))
}

func TestWaitOnForeignWaiter(t *testing.T) {
	c := make(chanWaiter)
	errc := make(chan error)
	go func() { errc <- gate.Wait(bounded(t), c) }()
	close(c)
	assert.NoError(t, recv(t, errc))
}

func TestAlreadyUnlocked(t *testing.T) {
	assert.True(t, gate.AlreadyUnlocked.IsUnlocked())
	assert.True(t, isClosed(gate.AlreadyUnlocked.Unlocked()))
	assert.Equal(t, gate.AlreadyUnlocked.Unlocked(), gate.AlreadyUnlocked.Unlocked(), "one shared channel")
}

func TestConcurrentUnlockFailWait(t *testing.T) {
	ctx := bounded(t)
	for i := 0; i < 100; i++ {
		l := gate.New("race")
		cause := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for w := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[w] = gate.Wait(ctx, l) }()
		}
		wg.Add(2)
		go func() { defer wg.Done(); l.Unlock() }()
		go func() { defer wg.Done(); l.Fail(cause) }()
		wg.Wait()
		// Every waiter saw the same outcome, and it is the gate's outcome.
		for _, err := range errs {
			if l.IsUnlocked() {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, cause)
			}
		}
	}
}

func TestUnlockReleasesTenThousandWaiters(t *testing.T) {
	const n = 10000
	l := gate.New("herd")
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	errs := make(chan error, n)
	ctx := bounded(t)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			started.Done()
			errs <- gate.Wait(ctx, l)
		}()
	}
	started.Wait()
	l.Unlock()
	done.Wait()
	close(errs)
	count := 0
	for err := range errs {
		require.NoError(t, err)
		count++
	}
	assert.Equal(t, n, count)
}

func TestAllOf(t *testing.T) {
	a, b := gate.New("a"), gate.New("b")
	c := make(chanWaiter)
	all := gate.AllOf("stable", a, b, c, gate.AlreadyUnlocked)
	assert.Equal(t, "stable", all.Name())
	a.Unlock()
	b.Unlock()
	assert.False(t, all.IsUnlocked(), "c is still locked")
	close(c)
	require.NoError(t, gate.Wait(bounded(t), all))
}

func TestAllOfFailsAsSoonAsAnyPartFails(t *testing.T) {
	a, b := gate.New("upgrade-steps"), gate.New("b")
	c := make(chanWaiter) // never unlocks: its follower must still end
	all := gate.AllOf("stable", a, b, c)
	cause := errors.New("step 3 failed")
	a.Fail(cause)
	err := gate.Wait(bounded(t), all)
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, gate.ErrFailed)
	assert.Contains(t, err.Error(), `"stable"`)
	assert.Contains(t, err.Error(), `"upgrade-steps"`)
	b.Unlock()
	assert.False(t, all.IsUnlocked())
}

func TestAllOfNoPartsIsUnlocked(t *testing.T) {
	assert.True(t, gate.AllOf("nothing").IsUnlocked())
}

func TestAllOfOfUnlockedPartsIsUnlockedAtOnce(t *testing.T) {
	a := gate.New("a")
	a.Unlock()
	assert.True(t, gate.AllOf("x", a, gate.AlreadyUnlocked).IsUnlocked())
}

func TestAnyOf(t *testing.T) {
	a, b := gate.New("a"), gate.New("b")
	c := make(chanWaiter)
	anyGate := gate.AnyOf("any", a, b, c)
	assert.False(t, anyGate.IsUnlocked())
	a.Fail(errors.New("a down"))
	assert.False(t, anyGate.IsUnlocked())
	assert.NoError(t, anyGate.Err(), "one part failing does not fail AnyOf")
	b.Unlock()
	require.NoError(t, gate.Wait(bounded(t), anyGate))
}

func TestAnyOfFailsOnlyWhenEveryPartFailed(t *testing.T) {
	a, b := gate.New("a"), gate.New("b")
	errA, errB := errors.New("a down"), errors.New("b down")
	anyGate := gate.AnyOf("any", a, b)
	a.Fail(errA)
	assert.NoError(t, anyGate.Err())
	b.Fail(errB)
	err := gate.Wait(bounded(t), anyGate)
	assert.ErrorIs(t, err, errA)
	assert.ErrorIs(t, err, errB)
}

func TestAnyOfForeignPartFollowerEndsWhenResolved(t *testing.T) {
	a := gate.New("a")
	c := make(chanWaiter) // never closes; goleak checks its follower ends
	anyGate := gate.AnyOf("any", a, c)
	a.Unlock()
	assert.True(t, anyGate.IsUnlocked())
}

func TestAnyOfNoPartsFailsAtOnce(t *testing.T) {
	l := gate.AnyOf("nothing")
	assert.False(t, l.IsUnlocked())
	assert.ErrorIs(t, l.Err(), gate.ErrFailed)
	assert.Contains(t, l.Err().Error(), "no parts")
}

func TestCompositesOfComposites(t *testing.T) {
	ctrl, api, steps := gate.New("ctrl"), gate.New("api"), gate.New("steps")
	stable := gate.AllOf("stable", ctrl, gate.AnyOf("either", api, steps))
	ctrl.Unlock()
	assert.False(t, stable.IsUnlocked())
	steps.Unlock()
	assert.True(t, stable.IsUnlocked())
}

func TestNilPartPanicsWithClearMessage(t *testing.T) {
	a := gate.New("a")
	assert.PanicsWithValue(t, `gate.AllOf("stable"): part 1 is nil`, func() { gate.AllOf("stable", a, nil) })
	var nilLock *gate.Lock
	assert.PanicsWithValue(t, `gate.AnyOf("x"): part 0 is nil`, func() { gate.AnyOf("x", nilLock) })
}

func TestFlagOnLockedGateBounces(t *testing.T) {
	l := gate.New("upgrade-done")
	f := gate.NewFlag(l)
	assert.False(t, f.Check())
	errc := make(chan error)
	go func() { errc <- f.Wait() }()
	l.Unlock()
	assert.ErrorIs(t, recv(t, errc), gate.ErrUnlocked)
	assert.False(t, f.Check(), "Check is fixed at construction")
	assert.True(t, gate.NewFlag(l).Check(), "a new flag sees the new value")
}

func TestFlagOnForeignWaiterBounces(t *testing.T) {
	c := make(chanWaiter)
	f := gate.NewFlag(c)
	assert.False(t, f.Check())
	errc := make(chan error)
	go func() { errc <- f.Wait() }()
	close(c)
	assert.ErrorIs(t, recv(t, errc), gate.ErrUnlocked)
}

func TestFlagOnLockedGateEndsWithFailure(t *testing.T) {
	l := gate.New("upgrade-done")
	f := gate.NewFlag(l)
	cause := errors.New("step failed")
	l.Fail(cause)
	assert.ErrorIs(t, f.Wait(), cause)
}

func TestFlagOnOpenGateRunsUntilKilled(t *testing.T) {
	f := gate.NewFlag(gate.AlreadyUnlocked)
	assert.True(t, f.Check())
	errc := make(chan error)
	go func() { errc <- f.Wait() }()
	f.Kill()
	f.Kill()
	assert.NoError(t, recv(t, errc))
}

func TestFlagKilledBeforeUnlock(t *testing.T) {
	f := gate.NewFlag(gate.New("g"))
	f.Kill()
	assert.NoError(t, f.Wait())
}

// engineWaiter stands for an engine's own interface with the same methods.
type engineWaiter interface {
	Unlocked() <-chan struct{}
	IsUnlocked() bool
}

func TestOutput(t *testing.T) {
	l := gate.New("g")
	var w gate.Waiter
	var u gate.Unlocker
	var lp *gate.Lock
	var ew engineWaiter
	require.NoError(t, gate.Output(l, &w))
	require.NoError(t, gate.Output(l, &u))
	require.NoError(t, gate.Output(l, &lp))
	require.NoError(t, gate.Output(l, &ew))
	assert.Same(t, l, w)
	assert.Same(t, l, u)
	assert.Same(t, l, lp)
	assert.Same(t, l, ew)

	require.Error(t, gate.Output(nil, &w), "a nil lock is not handed out")

	var s string
	var nilW *gate.Waiter
	var rw interface{ Read([]byte) (int, error) }
	for _, out := range []any{&s, nilW, w, nil, &rw} {
		err := gate.Output(l, out)
		require.Error(t, err, "%T", out)
		assert.Contains(t, err.Error(), `gate "g"`)
	}
}

// brokenFailer closes Done without unlocking or giving an error: a foreign
// implementation's bug that must not read as "unlocked".
type brokenFailer struct{ done chan struct{} }

func (b brokenFailer) Unlocked() <-chan struct{} { return make(chan struct{}) }
func (b brokenFailer) IsUnlocked() bool          { return false }
func (b brokenFailer) Done() <-chan struct{}     { return b.done }
func (b brokenFailer) Err() error                { return nil }

func TestFailerDoneWithoutErrorIsAFailure(t *testing.T) {
	b := brokenFailer{done: make(chan struct{})}
	close(b.done)
	assert.ErrorIs(t, gate.Wait(bounded(t), b), gate.ErrFailed)
	assert.ErrorIs(t, gate.Wait(bounded(t), gate.AllOf("all", b)), gate.ErrFailed)
	assert.ErrorIs(t, gate.NewFlag(b).Wait(), gate.ErrFailed)
}

// juju's tomb-based flag returns its first result from every Wait; an
// engine that calls Wait twice must not see a bounce turn into a clean
// stop, or the other way round.
func TestFlagWaitRepeatsItsFirstResult(t *testing.T) {
	for range 100 { // the gate opened and the flag was killed before any Wait
		l := gate.New("g")
		f := gate.NewFlag(l)
		l.Unlock()
		f.Kill()
		first := f.Wait()
		for range 10 {
			assert.Equal(t, first, f.Wait())
		}
	}

	l := gate.New("g")
	f := gate.NewFlag(l)
	const waiters = 8
	errs := make(chan error, waiters)
	for range waiters {
		go func() { errs <- f.Wait() }()
	}
	l.Unlock()
	f.Kill()
	first := recv(t, errs)
	for range waiters - 1 {
		assert.Equal(t, first, recv(t, errs))
	}
	assert.Equal(t, first, f.Wait())
}

// A sentinel says where it came from, as etcd's "election: not leader"
// does, and reads well wrapped.
func TestSentinelsNameTheirPackage(t *testing.T) {
	for _, err := range []error{gate.ErrUnlocked, gate.ErrFailed, gate.ErrDuplicateName} {
		assert.Regexp(t, `^gate: [a-z]`, err.Error())
	}
}
