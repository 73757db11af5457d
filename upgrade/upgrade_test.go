package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/upgrade"
)

var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

func TestPhaseString(t *testing.T) {
	for p, want := range map[upgrade.Phase]string{
		0:                         "unknown",
		upgrade.PhaseChecking:     "checking",
		upgrade.PhaseRunningSteps: "running-steps",
		upgrade.PhaseComplete:     "complete",
		upgrade.PhaseFailed:       "failed",
		upgrade.Phase(9):          "Phase(9)",
		upgrade.Phase(-1):         "Phase(-1)",
	} {
		assert.Equal(t, want, p.String())
	}
}

func TestNewGateStartsCheckingInEpochOne(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	assert.Equal(t, upgrade.PhaseChecking, g.Phase())
	assert.Equal(t, upgrade.Report{Phase: upgrade.PhaseChecking, Since: t0, Epoch: 1, Calls: []upgrade.CallsReport{
		{Phase: upgrade.PhaseChecking}, {Phase: upgrade.PhaseRunningSteps}, {Phase: upgrade.PhaseFailed}, {Phase: upgrade.PhaseDraining},
	}}, g.Report())
	var ip *upgrade.InProgressError
	require.ErrorAs(t, g.Admit(false), &ip)
	assert.Equal(t, upgrade.PhaseChecking, ip.Phase)
	assert.Equal(t, upgrade.DefaultRetryAfter, ip.RetryAfter())

	assert.NotNil(t, upgrade.NewGate(upgrade.GateConfig{}).Admit(false), "a nil clock means the wall clock")
}

func TestPhasesAndEpochs(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	step := func(d time.Duration, do func(), phase upgrade.Phase, epoch uint64) {
		t.Helper()
		clk.Advance(d)
		do()
		st := g.Report()
		assert.Equal(t, phase, st.Phase)
		assert.Equal(t, epoch, st.Epoch)
		assert.Equal(t, clk.Now(), st.Since)
	}
	enter := func(p upgrade.Phase) func() { return func() { require.NoError(t, g.Enter(p)) } }

	step(time.Second, enter(upgrade.PhaseRunningSteps), upgrade.PhaseRunningSteps, 1)
	step(time.Second, enter(upgrade.PhaseChecking), upgrade.PhaseChecking, 1) // back to checking: same attempt
	step(time.Second, g.Complete, upgrade.PhaseComplete, 1)
	assert.NoError(t, g.Admit(false))
	step(time.Second, enter(upgrade.PhaseChecking), upgrade.PhaseChecking, 2) // re-enters upgrade mode
	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeInProgress, "calls are refused again at once")
	cause := errors.New("step 3 exploded")
	step(time.Second, func() { g.Fail(cause) }, upgrade.PhaseFailed, 2)
	assert.Equal(t, cause, g.Report().LastErr)
	step(time.Second, enter(upgrade.PhaseRunningSteps), upgrade.PhaseRunningSteps, 3) // a new attempt after failure
	assert.Equal(t, cause, g.Report().LastErr, "LastErr survives into the next epoch")
	step(time.Second, g.Complete, upgrade.PhaseComplete, 3)

	// Entering the current phase is a no-op: Since does not move.
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	since := g.Report().Since
	clk.Advance(time.Second)
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	assert.Equal(t, since, g.Report().Since)
	assert.Equal(t, uint64(4), g.Report().Epoch)
}

func TestEnterRejectsPhasesItCannotEnter(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	for _, p := range []upgrade.Phase{0, upgrade.PhaseComplete, upgrade.PhaseFailed, upgrade.Phase(42), upgrade.Phase(-3)} {
		err := g.Enter(p)
		assert.ErrorIs(t, err, jujuerrors.NotValid, "phase %v", p)
		assert.ErrorContains(t, err, p.String())
		assert.Equal(t, upgrade.PhaseChecking, g.Phase(), "an invalid Enter changes nothing")
	}
}

func TestFirstOfCompleteAndFailWinsUntilEnter(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	g.Complete()
	g.Fail(errors.New("late"))
	assert.Equal(t, upgrade.PhaseComplete, g.Phase())
	assert.Nil(t, g.Report().LastErr)

	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	first := errors.New("first")
	g.Fail(first)
	g.Fail(errors.New("second"))
	g.Complete()
	assert.Equal(t, upgrade.PhaseFailed, g.Phase())
	assert.ErrorIs(t, g.Admit(false), first)
}

func TestErrIsThePerCallGuard(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	require.NoError(t, g.SetRetryAfter(3*time.Second))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))

	err := g.Admit(false)
	var ip *upgrade.InProgressError
	require.ErrorAs(t, err, &ip)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	assert.NotErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.Equal(t, upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: 3 * time.Second}, *ip)
	assert.Equal(t, "upgrade in progress (running upgrade steps); call not executed; retry after 3s", err.Error())

	cause := errors.New("disk full")
	g.Fail(cause)
	err = g.Admit(false)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.ErrorIs(t, err, cause)
	assert.NotErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	assert.Equal(t, "upgrade failed: disk full; call not executed", err.Error())

	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	g.Complete()
	assert.NoError(t, g.Admit(false))
}

func TestErrAllocatesNothing(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Admit(false) }))
	g.Complete()
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Admit(false) }))
}

func TestFailWithNilCauseStillFails(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	g.Fail(nil)
	assert.Equal(t, upgrade.PhaseFailed, g.Phase())
	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeFailed)
	assert.Error(t, g.Report().LastErr)
}

func TestSetRetryAfter(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	assert.ErrorIs(t, g.SetRetryAfter(0), jujuerrors.NotValid)
	assert.ErrorIs(t, g.SetRetryAfter(-time.Second), jujuerrors.NotValid)
	require.NoError(t, g.SetRetryAfter(7*time.Second))
	var ip *upgrade.InProgressError
	require.ErrorAs(t, g.Admit(false), &ip)
	assert.Equal(t, 7*time.Second, ip.RetryAfter())
	assert.Equal(t, uint64(1), g.Report().Epoch, "not a transition")
}

// wait is how code waits for the upgrade (Gate.Completed's doc): a
// select on the epoch's pair.
func wait(ctx context.Context, g *upgrade.Gate) error {
	select {
	case <-g.Completed():
		return nil
	case <-g.Failed():
		return &upgrade.FailedError{Err: g.Cause()}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestWait(t *testing.T) {
	t.Run("complete", func(t *testing.T) {
		g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
		done := make(chan error)
		go func() { done <- wait(context.Background(), g) }()
		require.NoError(t, g.Enter(upgrade.PhaseRunningSteps)) // not the end: wait keeps waiting
		g.Complete()
		assert.NoError(t, <-done)
		assert.NoError(t, wait(context.Background(), g), "returns at once once complete")
	})
	t.Run("failed", func(t *testing.T) {
		g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
		done := make(chan error)
		go func() { done <- wait(context.Background(), g) }()
		cause := errors.New("bad step")
		g.Fail(cause)
		err := <-done
		assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
		assert.ErrorIs(t, err, cause)
	})
	t.Run("ctx ends", func(t *testing.T) {
		g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- wait(ctx, g) }()
		cancel()
		err := <-done
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestTransitionHookOrderAndCauses(t *testing.T) {
	type tr struct {
		from, to upgrade.Phase
		err      error
	}
	var got []tr
	var g *upgrade.Gate
	g = upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), OnTransition: func(from, to upgrade.Phase, err error) {
		got = append(got, tr{from, to, err})
		_ = g.Report() // the hook runs outside the gate's lock
	}})
	cause := errors.New("boom")
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps)) // no-op: no hook
	g.Fail(cause)
	require.NoError(t, g.SetRetryAfter(2*time.Second)) // not a transition
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	g.Complete()
	assert.Equal(t, []tr{
		{upgrade.PhaseChecking, upgrade.PhaseRunningSteps, nil},
		{upgrade.PhaseRunningSteps, upgrade.PhaseFailed, cause},
		{upgrade.PhaseFailed, upgrade.PhaseChecking, nil},
		{upgrade.PhaseChecking, upgrade.PhaseComplete, nil},
	}, got)
}

func TestTransitionHookMayTransitionTheGate(t *testing.T) {
	var got []upgrade.Phase
	var g *upgrade.Gate
	g = upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), OnTransition: func(from, to upgrade.Phase, err error) {
		got = append(got, to)
		if to == upgrade.PhaseRunningSteps {
			g.Complete() // would deadlock if hooks ran under the gate's lock
			assert.Equal(t, []upgrade.Phase{upgrade.PhaseRunningSteps}, got, "the nested transition's hook runs after this one returns")
		}
	}})
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	assert.Equal(t, []upgrade.Phase{upgrade.PhaseRunningSteps, upgrade.PhaseComplete}, got)
	assert.Equal(t, upgrade.PhaseComplete, g.Phase())
}

func TestTransitionHookSeesEveryTransitionInOrderUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	var got [][2]upgrade.Phase
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), Logger: h.Logger(), OnTransition: func(from, to upgrade.Phase, err error) {
		mu.Lock()
		got = append(got, [2]upgrade.Phase{from, to})
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					_ = g.Enter(upgrade.PhaseRunningSteps)
				} else {
					g.Complete()
				}
			}
		})
	}
	wg.Wait()
	h.Seal(t) // every call has returned: every record and hook is done
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, got)
	assert.Len(t, h.Records(), len(got), "one record per hooked transition")
	assert.Equal(t, upgrade.PhaseChecking, got[0][0])
	for i := 1; i < len(got); i++ {
		assert.Equal(t, got[i-1][1], got[i][0], "transition %d does not continue from the previous one", i)
	}
	assert.Equal(t, g.Phase(), got[len(got)-1][1])
}

func TestTransitionHookPanicDoesNotWedgeTheGate(t *testing.T) {
	calls := 0
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), OnTransition: func(from, to upgrade.Phase, err error) {
		calls++
		if calls == 1 {
			panic("hook bug")
		}
	}})
	assert.Panics(t, func() { _ = g.Enter(upgrade.PhaseRunningSteps) })
	assert.Equal(t, upgrade.PhaseRunningSteps, g.Phase(), "the transition happened before the hook")
	g.Complete()
	assert.Equal(t, 2, calls, "later transitions still reach the hook")
}

// The dialer convention for "try again later" is a RetryAfter() method:
// errors.As finds it on the refusal, through any wrapping, and what it
// finds is the refusal itself.
func TestInProgressErrorOffersTheRetryAfterMethod(t *testing.T) {
	refusal := &upgrade.InProgressError{Phase: upgrade.PhaseChecking, RetryDelay: 3 * time.Second}
	err := fmt.Errorf("dial 10.0.0.2:17070: %w", refusal)

	var hint interface{ RetryAfter() time.Duration }
	require.True(t, errors.As(err, &hint))
	assert.Equal(t, 3*time.Second, hint.RetryAfter())
	hintErr, ok := hint.(error)
	require.True(t, ok, "the hint is the refusal itself, an error")
	assert.Equal(t, refusal.Error(), hintErr.Error())
	assert.ErrorIs(t, hintErr, upgrade.ErrUpgradeInProgress)
	var back *upgrade.InProgressError
	require.ErrorAs(t, hintErr, &back)
	assert.Same(t, refusal, back)

	var both interface {
		error
		RetryAfter() time.Duration
	}
	require.True(t, errors.As(err, &both))
	assert.Equal(t, 3*time.Second, both.RetryAfter())

	var timeout interface{ Timeout() bool }
	assert.False(t, errors.As(err, &timeout), "unrelated interfaces are not offered")
	var none interface{ RetryAfter() time.Duration }
	require.True(t, errors.As(&upgrade.InProgressError{Phase: upgrade.PhaseChecking}, &none))
	assert.Zero(t, none.RetryAfter(), "no hint: zero, which every reader takes as 'use your own backoff'")
	assert.Zero(t, (*upgrade.InProgressError)(nil).RetryAfter(), "safe on a nil error")

	// The gate's own refusals carry the hint too.
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	require.True(t, errors.As(g.Admit(false), &hint))
	assert.Equal(t, upgrade.DefaultRetryAfter, hint.RetryAfter())
}

func TestPhaseText(t *testing.T) {
	for _, p := range []upgrade.Phase{upgrade.PhaseChecking, upgrade.PhaseRunningSteps, upgrade.PhaseComplete, upgrade.PhaseFailed, upgrade.PhaseDraining} {
		text, err := p.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, p.String(), string(text))
		var back upgrade.Phase
		require.NoError(t, back.UnmarshalText(text))
		assert.Equal(t, p, back)
	}
	back := upgrade.PhaseRunningSteps
	err := back.UnmarshalText([]byte("defragmenting"))
	assert.ErrorIs(t, err, jujuerrors.NotValid, "a newer server's phase")
	assert.Zero(t, back, "an unknown phase decodes to the zero Phase")
}

// TestCompletedAndFailedChannelsPerEpoch: the channels a board watches. Each
// epoch has its own pair; the transition that ends the epoch closes one of
// them, never both, and a new epoch starts with a fresh, open pair.
func TestCompletedAndFailedChannelsPerEpoch(t *testing.T) {
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	done1, failed1 := g.Completed(), g.Failed()
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	require.NoError(t, g.SetRetryAfter(2*time.Second))
	assert.Equal(t, done1, g.Completed(), "same epoch, same channel")
	assert.Equal(t, failed1, g.Failed())
	assert.False(t, isClosed(done1) || isClosed(failed1), "open while the upgrade runs")

	g.Complete()
	g.Fail(errors.New("late")) // a no-op: the epoch has ended
	assert.True(t, isClosed(done1), "closed when the epoch completes")
	assert.False(t, isClosed(failed1), "a completed epoch never fails")
	require.NoError(t, g.SetRetryAfter(3*time.Second)) // republishes Complete: nothing closes twice
	assert.Equal(t, done1, g.Completed())

	require.NoError(t, g.Enter(upgrade.PhaseChecking)) // epoch 2
	done2, failed2 := g.Completed(), g.Failed()
	assert.NotEqual(t, done1, done2, "a new epoch replaces the closed channel")
	assert.Equal(t, failed1, failed2, "and keeps the open one")
	assert.False(t, isClosed(done2) || isClosed(failed2))
	assert.True(t, isClosed(done1), "the old epoch's answer stays")

	g.Fail(errors.New("step 4"))
	g.Complete() // a no-op
	assert.True(t, isClosed(failed2))
	assert.False(t, isClosed(done2))

	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps)) // epoch 3
	assert.NotEqual(t, failed2, g.Failed())
	assert.Equal(t, done2, g.Completed())
	assert.False(t, isClosed(g.Completed()) || isClosed(g.Failed()))
}

// The pair gate.Channels takes is read in two calls; a failed epoch retried
// between them must not leave a pair that never closes (the entry would
// stay locked and /readyz answer 503 after the retry completed).
func TestCompletedFailedPairSurvivesARetryBetweenReads(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	completed := g.Completed()
	g.Fail(errors.New("step 2"))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	failed := g.Failed()
	g.Complete()
	select {
	case <-completed:
	case <-failed:
		t.Fatal("the retried epoch completed, but the pair says failed")
	default:
		t.Fatal("neither channel of the pair closed when the retried epoch completed")
	}
}

// A sentinel says where it came from, as etcd's "election: not leader"
// does, and reads well wrapped.
func TestSentinelsNameTheirPackage(t *testing.T) {
	for _, err := range []error{upgrade.ErrUpgradeInProgress, upgrade.ErrUpgradeFailed} {
		assert.Regexp(t, `^upgrade: [a-z]`, err.Error())
	}
}
