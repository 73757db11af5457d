package grpcupgrade_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// noTimerArmed fails t if anything armed a timer on clk since the last
// receive from its Alarms: a component that arms none cannot log, count
// or call a hook later, on its own.
func noTimerArmed(t *testing.T, clk *testclock.Clock, what string) {
	t.Helper()
	select {
	case <-clk.Alarms():
		t.Errorf("%s armed a timer: something would happen after the calls returned", what)
	default:
	}
}

// calls runs n calls of call from a few goroutines and checks each code.
func calls(t *testing.T, n int, want codes.Code, call func() error) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for range work {
				assert.Equal(t, want, status.Code(call()))
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// The server interceptors count every call they decide while the gate
// refuses — unary and stream, refused or allowlisted, by phase — in the
// gate's Report, and log none: the gate's records are its phase changes.
func TestServerInterceptorsCountTheirCallsInTheGate(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: h.Logger()})
	s := newServer(t, g, grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName))
	client := dial(t, s, grpc.WithDisableRetry())
	ctx := context.Background()
	check := func() error { _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); return err }
	list := func() error { _, err := client.List(ctx, &healthpb.HealthListRequest{}); return err }
	watch := func() error {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}

	calls(t, 1000, codes.Unavailable, list)
	calls(t, 200, codes.Unavailable, watch)
	calls(t, 30, codes.OK, check)
	g.Fail(errors.New("disk full"))
	calls(t, 40, codes.FailedPrecondition, list)
	calls(t, 2, codes.OK, check)
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	g.Complete()
	calls(t, 10, codes.Unimplemented, list) // served: the health server has no List
	calls(t, 10, codes.OK, watch)

	assert.Equal(t, []upgrade.CallsReport{
		{Phase: upgrade.PhaseChecking, Admitted: 30, Refused: 1200},
		{Phase: upgrade.PhaseRunningSteps},
		{Phase: upgrade.PhaseFailed, Admitted: 2, Refused: 40},
		{Phase: upgrade.PhaseDraining},
	}, g.Report().Calls)
	assert.Equal(t, int64(30+2+10), s.health.n.Load(), "only admitted calls ran")

	h.Seal(t)
	assert.Len(t, h.Records(), 3, "1,292 calls decided, three phase changes: three records")
	assert.Len(t, h.Matching("upgrade phase changed"), 3)
	noTimerArmed(t, clk, "the gate")
	clk.Advance(time.Hour) // nothing is pending: Seal fails the test on a late record
}

// The client interceptor takes no logger: WithNotify, its one hook, sees
// every wait of every call, inside the call. 20 calls refused together
// wait, and nothing else arms a timer.
func TestClientInterceptorHooksEachWaitInsideItsCall(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newServer(t, g, nil)
	var waits atomic.Int64
	client := dial(t, s, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(
		grpcupgrade.UnaryClientInterceptor(nil, upgrade.WithClock(clk), upgrade.WithNotify(func(int, error, time.Duration) { waits.Add(1) }))))

	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			assert.NoError(t, err)
		})
	}
	// Every call waits (at most 2 s, the server's [R, 2R]); the upgrade
	// completes meanwhile.
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, n))
	g.Complete()
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, n))
	wg.Wait()
	assert.Equal(t, int64(n), s.health.n.Load())
	assert.Equal(t, int64(n), waits.Load())
}

// A call whose ctx ends while it waits (a SIGTERM) answers codes.Canceled
// and leaves nothing behind: no timer, no hook called later.
func TestClientInterceptorStopsWithItsCall(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newServer(t, g, nil)
	var waits atomic.Int64
	client := dial(t, s, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(
		grpcupgrade.UnaryClientInterceptor(upgrade.WithClock(clk), upgrade.WithNotify(func(int, error, time.Duration) { waits.Add(1) }))))

	ctx, sigterm := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-clk.Alarms() // waiting out the refusal
	sigterm()
	err := <-done
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal")
	noTimerArmed(t, clk, "the interceptor after the call returned")
	clk.Advance(time.Hour)
	assert.Equal(t, int64(1), waits.Load(), "one wait, no hook after the call returned")
}
