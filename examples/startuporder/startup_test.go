package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/gatetest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	retry   = time.Second
	timeout = 10 * time.Second // only a bound against hangs, never reached when the code is right
)

// fakes are controllable startup steps: the test decides when the upgrade
// steps finish and how many self-dials fail.
type fakes struct {
	upgradeDone  chan error
	dialFailures atomic.Int32 // dials left to fail
	dials        atomic.Int32
	apiOpened    atomic.Int32
}

func newFakes(dialFailures int) *fakes {
	f := &fakes{upgradeDone: make(chan error, 1)}
	f.dialFailures.Store(int32(dialFailures))
	return f
}

func (f *fakes) steps() Steps {
	return Steps{
		BindControllerPort: func() error { return nil },
		SelfDial: func(ctx context.Context) error {
			f.dials.Add(1)
			if f.dialFailures.Add(-1) >= 0 {
				return errors.New("connection refused")
			}
			return nil
		},
		RunUpgradeSteps: func(ctx context.Context) error {
			select {
			case err := <-f.upgradeDone:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		OpenAPIPort: func() error { f.apiOpened.Add(1); return nil },
	}
}

func start(t *testing.T, s *Startup) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return done
}

// result is what Run returned; a Run that never returns (a startup stuck on
// a gate that can no longer open) fails the test instead of hanging it.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("Run has not returned after %v", timeout)
		return nil
	}
}

// TestCriticalChainNamesWhatMadeStartupSlow: on a testclock the chain
// and its times are exact. The upgrade ends after 5s, the self-dial after
// two retries (2s): the API port waited on stable, and stable on the
// upgrade, not on the self-dial.
func TestCriticalChainNamesWhatMadeStartupSlow(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	f := newFakes(2)
	s := NewStartup(clk, f.steps(), retry)
	done := start(t, s)
	require.NoError(t, clk.WaitAdvance(retry, timeout, 1))
	require.NoError(t, clk.WaitAdvance(retry, timeout, 1)) // third dial succeeds, at 2s
	gatetest.AssertUnlocksWithin(t, s.SelfDialed, timeout)
	clk.Advance(3 * time.Second)
	f.upgradeDone <- nil // at 5s
	require.NoError(t, result(t, done))

	assert.Equal(t, "api-port @5s\n└─stable @5s\n  └─upgrade-steps @5s +5s\n",
		s.Board.Timeline().CriticalChain("api-port").String())
}

func TestAPIPortOpensOnlyAfterUpgradeStepsAndSelfDial(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	f := newFakes(2)
	s := NewStartup(clk, f.steps(), retry)
	rec := gatetest.NewRecorder(s.ControllerPort, s.SelfDialed, s.Upgraded, s.Stable, s.APIOpen)
	done := start(t, s)

	gatetest.AssertUnlocksWithin(t, s.ControllerPort, timeout)

	// The first self-dial failed and its retry waits on the clock: the API
	// port must stay closed however long the upgrade takes.
	require.NoError(t, clk.WaitAdvance(retry, timeout, 1)) // second dial fails too
	gatetest.AssertLocked(t, s.SelfDialed)
	f.upgradeDone <- nil
	gatetest.AssertUnlocksWithin(t, s.Upgraded, timeout)
	gatetest.AssertLocked(t, s.APIOpen)
	assert.Equal(t, int32(0), f.apiOpened.Load())

	require.NoError(t, clk.WaitAdvance(retry, timeout, 1)) // third dial succeeds
	require.NoError(t, result(t, done))

	assert.Equal(t, int32(3), f.dials.Load())
	assert.Equal(t, int32(1), f.apiOpened.Load())
	rec.AssertOrder(t, "controller-port", "upgrade-steps", "self-dial", "stable", "api-port")
}

func TestAPIPortWaitsForUpgradeAfterSelfDial(t *testing.T) {
	f := newFakes(0)
	s := NewStartup(testclock.NewClock(time.Time{}), f.steps(), retry)
	rec := gatetest.NewRecorder(s.SelfDialed, s.Upgraded, s.APIOpen)
	done := start(t, s)

	gatetest.AssertUnlocksWithin(t, s.SelfDialed, timeout)
	gatetest.AssertLocked(t, s.Stable)
	gatetest.AssertLocked(t, s.APIOpen)
	// What would an operator see now? The board names the missing step.
	var pending []string // the board lists the longest-waiting first
	for _, e := range s.Board.Report() {
		if e.State == gate.StateLocked {
			pending = append(pending, e.Name)
		}
	}
	assert.Equal(t, []string{"upgrade-steps", "api-port", "stable"}, pending)

	f.upgradeDone <- nil
	require.NoError(t, result(t, done))
	rec.AssertOrder(t, "self-dial", "upgrade-steps", "api-port")
}

func TestFailedUpgradeNeverOpensAPIPort(t *testing.T) {
	f := newFakes(1_000_000) // the self-dial never succeeds either
	s := NewStartup(testclock.NewClock(time.Time{}), f.steps(), retry)
	done := start(t, s)

	schema := errors.New("step 3: schema migration failed")
	f.upgradeDone <- schema
	err := result(t, done)
	assert.ErrorIs(t, err, schema)
	assert.ErrorIs(t, err, s.Upgraded.Err(), "the upgrade-steps gate's failure")
	assert.ErrorContains(t, err, "API port stays closed")

	gatetest.AssertLocked(t, s.APIOpen)
	gatetest.AssertFailsWithin(t, s.Stable, schema, timeout)
	assert.Equal(t, int32(0), f.apiOpened.Load(), "the API port was never opened")
	assert.Contains(t, s.Board.Report().String(), "failed: upgrade-steps")
}

func TestCancelledStartupLeavesNothingRunning(t *testing.T) {
	f := newFakes(1_000_000)
	s := NewStartup(testclock.NewClock(time.Time{}), f.steps(), retry)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	gatetest.AssertUnlocksWithin(t, s.ControllerPort, timeout)
	cancel()
	assert.ErrorIs(t, result(t, done), context.Canceled)
	gatetest.AssertLocked(t, s.APIOpen)
	// goleak (TestMain) checks the self-dial and upgrade goroutines ended.
}

// The singular worker runs only once the API port is open and only while
// the controller holds the lease; a rival's takeover stops it, and it runs
// again when the controller leads again.
func TestSingularWorkerRunsOnlyWhileLeadingAfterAPIPortOpens(t *testing.T) {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "c0",
		Duration: 10 * time.Second, Clock: clk})
	require.NoError(t, err)
	defer tr.Close()

	f := newFakes(0)
	s := NewStartup(testclock.NewClock(time.Time{}), f.steps(), retry)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := make(chan uint64)
	stopped := make(chan error)
	singular := make(chan error, 1)
	go func() {
		singular <- s.RunSingular(ctx, tr, func(ctx context.Context, token uint64) error {
			runs <- token
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil
		})
	}()
	if _, err := tr.Check(ctx, 0); err != nil { // the tracker leads...
		t.Fatal(err)
	}
	select { // ...but the API port is not open yet
	case token := <-runs:
		t.Fatalf("the worker ran (token %d) before the API port opened", token)
	default:
	}
	done := start(t, s)
	f.upgradeDone <- nil
	require.NoError(t, result(t, done))
	first := <-runs

	// A rival takes over behind our back (the store tells the tracker).
	require.NoError(t, store.Revoke(ctx, leasestore.Grant{Name: "singular", Holder: "c0", Token: first}))
	_, err = store.Claim(ctx, "singular", "c1", 5*time.Second)
	require.NoError(t, err)
	assert.ErrorIs(t, <-stopped, lease.ErrNotLeader)

	// The rival's term runs out; c0 claims again and the worker runs again.
	for {
		r, err := leasetest.Step(ctx, tr, clk)
		require.NoError(t, err)
		if r.State == lease.Held {
			break
		}
	}
	assert.Greater(t, <-runs, first)
	cancel()
	<-stopped
	require.ErrorIs(t, <-singular, context.Canceled)
}
