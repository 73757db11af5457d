package grpcupgrade_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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

// interval is logcount's: how long a count waits to be logged.
const interval = 10 * time.Second

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
// gate's Report and in one record per phase per interval.
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
	require.NoError(t, g.Enter(upgrade.RunningSteps))
	g.Complete()
	calls(t, 10, codes.Unimplemented, list) // served: the health server has no List
	calls(t, 10, codes.OK, watch)

	assert.Equal(t, []upgrade.CallsReport{
		{Phase: upgrade.Checking, Admitted: 30, Refused: 1200},
		{Phase: upgrade.RunningSteps},
		{Phase: upgrade.Failed, Admitted: 2, Refused: 40},
	}, g.Report().Calls)
	assert.Equal(t, int64(30+2+10), s.health.n.Load(), "only admitted calls ran")

	require.NoError(t, clk.WaitAdvance(interval, waitTimeout, 1))
	recs := h.WaitMessage(t, "calls refused during upgrade", 2)
	require.Len(t, recs, 2, "1,272 calls decided, two records")
	byPhase := map[string]logtest.Record{}
	for _, r := range recs {
		byPhase[r.Str("phase")] = r
	}
	assert.Equal(t, slog.LevelInfo, byPhase["checking"].Level)
	assert.Equal(t, uint64(1200), byPhase["checking"].Uint64(t, "refused"))
	assert.Equal(t, uint64(30), byPhase["checking"].Uint64(t, "admitted"))
	assert.Equal(t, slog.LevelWarn, byPhase["failed"].Level)
	assert.Equal(t, uint64(40), byPhase["failed"].Uint64(t, "refused"))
	assert.Equal(t, uint64(2), byPhase["failed"].Uint64(t, "admitted"))
}

// The client interceptor keeps its options, so the waits of all its calls
// make one record: 20 calls refused together, one record with waits=20.
func TestClientInterceptorLogsTheWaitsOfAllItsCallsTogether(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(
		grpcupgrade.UnaryClientInterceptor(upgrade.WithClock(clk), upgrade.WithLogger(h.Logger()))))

	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			assert.NoError(t, err)
		})
	}
	// Every call waits (at most 2 s, the server's [R, 2R]), beside the
	// records' timer; the upgrade completes meanwhile.
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, n+1))
	g.Complete()
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, n+1))
	wg.Wait()
	assert.Equal(t, int64(n), s.health.n.Load())

	require.NoError(t, clk.WaitAdvance(interval-2*time.Second, waitTimeout, 1))
	recs := h.WaitMessage(t, "waiting out upgrade refusals", 1)
	require.Len(t, h.Records(), 1)
	assert.Equal(t, uint64(n), recs[0].Uint64(t, "waits"))
}
