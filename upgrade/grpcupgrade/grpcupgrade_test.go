package grpcupgrade_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// TestBuiltInRetryWaitsThePushbackOut: a grpc-go client with nothing but a
// retry service config rides out an upgrade: each refusal's pushback
// (drawn from [R, 2R]) replaces its ~1 ms backoff, and the call is
// executed once, when the upgrade is complete.
func TestBuiltInRetryWaitsThePushbackOut(t *testing.T) {
	const r = 100 * time.Millisecond
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.NoError(t, g.SetRetryAfter(r))
	s := newServer(t, g, nil)
	s.attempts.onRefusal = func(n int) {
		if n == 3 {
			g.Complete()
		}
	}
	client := dial(t, s, grpc.WithDefaultServiceConfig(retryPolicy))

	resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	at := s.attempts.times()
	require.Len(t, at, 4, "three refusals, then served")
	for i := 1; i < len(at); i++ {
		assert.GreaterOrEqual(t, at[i].Sub(at[i-1]), r, "attempt %d came before the pushback had passed", i+1)
	}
	assert.Equal(t, int64(1), s.health.n.Load(), "executed once")
}

// TestBuiltInRetryGivesUpAfterFiveAttempts is why UnaryClientInterceptor
// exists: grpc-go caps a retry policy at 5 attempts (even one asking for
// 50), so an upgrade longer than five pushbacks fails the call.
func TestBuiltInRetryGivesUpAfterFiveAttempts(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.NoError(t, g.SetRetryAfter(10*time.Millisecond))
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDefaultServiceConfig(strings.Replace(retryPolicy, `"maxAttempts": 5`, `"maxAttempts": 50`, 1)))

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Len(t, s.attempts.times(), 5)
	assert.ErrorIs(t, grpcupgrade.FromError(err), upgrade.ErrUpgradeInProgress)
	assert.Zero(t, s.health.n.Load())
}

// TestBuiltInRetryStopsAtOnceOnFailure: the failed answer's pushback of -1
// stops grpc-go's retry even though the policy lists FAILED_PRECONDITION as
// retryable, and the client sees the cause, once.
func TestBuiltInRetryStopsAtOnceOnFailure(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("upgrade step 7 (migrate leases): disk full"))
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDefaultServiceConfig(retryPolicy))

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Len(t, s.attempts.times(), 1, "not retried")
	err = grpcupgrade.FromError(err)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.EqualError(t, err, "upgrade failed: upgrade step 7 (migrate leases): disk full; call not executed")
	var fe *upgrade.FailedError
	require.ErrorAs(t, err, &fe)
	assert.EqualError(t, fe.Err, "upgrade step 7 (migrate leases): disk full")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "FromError's error still answers status.Code")
	assert.Zero(t, s.health.n.Load())
}

// TestInterceptorClientRidesOutATenSecondUpgrade: with
// UnaryClientInterceptor (and no built-in retry) a client rides out an
// upgrade far longer than five pushbacks; the waits run on a test clock,
// and the call is executed once.
func TestInterceptorClientRidesOutATenSecondUpgrade(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	require.NoError(t, g.SetRetryAfter(500*time.Millisecond))
	s := newServer(t, g, nil)
	waits := make(chan time.Duration)
	client := dial(t, s, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor(
		upgrade.WithBackoff(50*time.Millisecond, time.Second),
		upgrade.WithNotify(func(_ int, err error, wait time.Duration) {
			var ip *upgrade.InProgressError
			if assert.ErrorAs(t, err, &ip) {
				assert.Equal(t, ip.RetryAfter(), wait, "waits exactly the server's RetryInfo delay: one jitter")
				assert.True(t, ip.RetryAfter() >= 500*time.Millisecond && ip.RetryAfter() <= time.Second, "delay %v not in [R, 2R]", ip.RetryAfter())
			}
			waits <- wait
		}), upgrade.WithClock(clk))))

	done := make(chan error, 1)
	go func() {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	var elapsed time.Duration
	refusals := 0
	for {
		select {
		case wait := <-waits:
			refusals++
			if elapsed += wait; elapsed >= 10*time.Second {
				g.Complete() // the upgrade took 10 s on the test clock
			}
			require.NoError(t, clk.WaitAdvance(wait, waitTimeout, 1))
			continue
		case err := <-done:
			require.NoError(t, err)
		}
		break
	}
	assert.Greater(t, refusals, 5, "more refusals than built-in retry's 5 attempts")
	assert.Len(t, s.attempts.times(), refusals+1)
	assert.Equal(t, int64(1), s.health.n.Load(), "executed once")
}

func TestInterceptorClientStopsAtOnceOnFailure(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("no agent binaries for 1.24.5 on linux/amd64"))
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor(upgrade.WithClock(testclock.NewClock(t0)))))

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.EqualError(t, err, "upgrade failed: no agent binaries for 1.24.5 on linux/amd64; call not executed")
	assert.Len(t, s.attempts.times(), 1)
}

// TestInterceptorClientCtxEndsTheWait: cancelling ctx while the client waits
// out a long pushback returns at once with codes.Canceled (and leaves no
// goroutine behind: TestMain runs goleak); a deadline the pushback would
// overrun returns at once with codes.DeadlineExceeded.
func TestInterceptorClientCtxEndsTheWait(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	require.NoError(t, g.SetRetryAfter(time.Hour))
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor(upgrade.WithClock(clk))))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1)) // waiting out the pushback
	cancel()
	err := <-done
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal is kept")
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 0), "the timer was stopped")

	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	assert.NoError(t, ctx.Err(), "returned at once, not at the deadline")
	assert.Zero(t, s.health.n.Load())
}

// TestStreamsAreRefusedBeforeTheHandler: a stream opened during an upgrade
// ends with the refusal, its trailer carries the pushback, and the handler
// never runs; an allowlisted stream is served.
func TestStreamsAreRefusedBeforeTheHandler(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDisableRetry())

	stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err))
	var ip *upgrade.InProgressError
	require.ErrorAs(t, grpcupgrade.FromError(err), &ip)
	assert.Equal(t, upgrade.PhaseRunningSteps, ip.Phase)
	pushback, perr := strconv.Atoi(first(stream.Trailer()["grpc-retry-pushback-ms"]))
	require.NoError(t, perr)
	assert.True(t, pushback >= 1000 && pushback <= 2000, "pushback %d ms not in [R, 2R]", pushback)
	assert.Equal(t, time.Duration(pushback)*time.Millisecond, ip.RetryAfter(), "RetryInfo and the trailer agree")

	g.Fail(errors.New("step 2"))
	stream, err = client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.ErrorIs(t, grpcupgrade.FromError(err), upgrade.ErrUpgradeFailed)
	assert.Equal(t, "-1", first(stream.Trailer()["grpc-retry-pushback-ms"]))
	assert.Zero(t, s.health.n.Load(), "no handler ran")

	allowed := newServer(t, g, grpcupgrade.AllowMethods(healthpb.Health_Watch_FullMethodName))
	stream, err = dial(t, allowed).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	resp, err := stream.Recv()
	require.NoError(t, err, "allowlisted methods are served in every phase")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func TestAllowlistedUnaryCallsAreServedDuringTheUpgrade(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newServer(t, g, grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName))
	client := dial(t, s)
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = client.List(context.Background(), &healthpb.HealthListRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err), "List is not on the list")
}

func TestAllowMethodsPanicsOnATypo(t *testing.T) {
	for _, bad := range []string{"", "/", "grpc.health.v1.Health/Check", "/grpc.health.v1.Health", "/grpc.health.v1.Health/", "//Check", "/a/b/c"} {
		assert.Panics(t, func() { grpcupgrade.AllowMethods(bad) }, "%q", bad)
	}
	allow := grpcupgrade.AllowMethods("/a.B/C")
	assert.True(t, allow("/a.B/C"))
	assert.False(t, allow("/a.B/D"))
}

func TestServerInterceptorsPanicOnANilGate(t *testing.T) {
	assert.Panics(t, func() { grpcupgrade.UnaryServerInterceptor(nil, nil) })
	assert.Panics(t, func() { grpcupgrade.StreamServerInterceptor(nil, nil) })
}

// TestRefusedCallsAreNeverExecutedAcrossTransitions is the not-executed
// promise over a real connection while the gate flips between PhaseComplete and
// upgrade mode: every call answered with a refusal is absent from what the
// handlers executed, and every served call was executed exactly once.
func TestRefusedCallsAreNeverExecutedAcrossTransitions(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newServer(t, g, nil)
	client := dial(t, s, grpc.WithDisableRetry())

	stop := make(chan struct{})
	flips := make(chan int)
	go func() {
		n := 0
		defer func() { flips <- n }()
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			switch n % 3 {
			case 0:
				g.Complete()
			case 1:
				_ = g.Enter(upgrade.PhaseChecking)
			case 2:
				_ = g.Enter(upgrade.PhaseRunningSteps)
			}
		}
	}()
	const workers, perWorker = 4, 100
	var mu sync.Mutex
	outcome := map[string]error{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := strconv.Itoa(w*perWorker + i)
				ctx := metadata.AppendToOutgoingContext(context.Background(), "request-id", id)
				var err error
				if i%2 == 0 {
					_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
				} else {
					var stream grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
					if stream, err = client.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
						_, err = stream.Recv()
					}
				}
				mu.Lock()
				outcome[id] = grpcupgrade.FromError(err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	require.Positive(t, <-flips)

	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	served, refused := 0, 0
	for id, err := range outcome {
		switch {
		case err == nil:
			served++
			assert.Equal(t, 1, s.health.executed[id], "call %s answered but executed %d times", id, s.health.executed[id])
		case errors.Is(err, upgrade.ErrUpgradeInProgress):
			refused++
			assert.Zero(t, s.health.executed[id], "refused call %s was executed", id)
		default:
			t.Errorf("call %s: %v", id, err)
		}
	}
	assert.Equal(t, workers*perWorker, served+refused)
	assert.Len(t, s.health.executed, served)
	t.Logf("%d served, %d refused", served, refused)
}

func TestFromError(t *testing.T) {
	withDetails := func(c codes.Code, msg string, details ...*errdetails.ErrorInfo) error {
		st := status.New(c, msg)
		for _, d := range details {
			var err error
			st, err = st.WithDetails(d)
			require.NoError(t, err)
		}
		return st.Err()
	}
	plain := errors.New("connection reset")
	assert.NoError(t, grpcupgrade.FromError(nil))
	assert.Same(t, plain, grpcupgrade.FromError(plain), "not a status: unchanged")
	for name, err := range map[string]error{
		"a bare Unavailable (a proxy, a broken connection)": status.Error(codes.Unavailable, "no healthy upstream"),
		"another domain": withDetails(codes.Unavailable, "x", &errdetails.ErrorInfo{Reason: grpcupgrade.ReasonInProgress, Domain: "example.com"}),
		"another reason": withDetails(codes.Unavailable, "x", &errdetails.ErrorInfo{Reason: "QUOTA", Domain: grpcupgrade.Domain}),
	} {
		assert.Equal(t, err, grpcupgrade.FromError(err), name)
	}

	err := grpcupgrade.FromError(withDetails(codes.Unavailable, "upgrade in progress",
		&errdetails.ErrorInfo{Reason: grpcupgrade.ReasonInProgress, Domain: grpcupgrade.Domain, Metadata: map[string]string{"phase": "defragmenting"}}))
	var ip *upgrade.InProgressError
	require.ErrorAs(t, err, &ip)
	assert.Zero(t, ip.Phase, "a phase this client does not know")
	assert.Zero(t, ip.RetryAfter(), "no RetryInfo: no hint")
	assert.Equal(t, codes.Unavailable, status.Code(err))

	err = grpcupgrade.FromError(withDetails(codes.FailedPrecondition, "upgrade failed: step 3; call not executed",
		&errdetails.ErrorInfo{Reason: grpcupgrade.ReasonFailed, Domain: grpcupgrade.Domain}))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.EqualError(t, err, "upgrade failed: the server gave no cause; call not executed",
		"no cause in the metadata: the message, which already wraps one, is not nested")

	// The one hint mechanism: a reader that knows nothing of upgrade.
	g := upgrade.NewGate(upgrade.GateConfig{})
	unary := grpcupgrade.UnaryServerInterceptor(g, nil)
	_, refusal := unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, nil)
	var hint interface{ RetryAfter() time.Duration }
	require.True(t, errors.As(grpcupgrade.FromError(refusal), &hint))
	assert.True(t, hint.RetryAfter() >= time.Second && hint.RetryAfter() <= 2*time.Second)
}

// A handler that passes on a refusal from a call of its own (a downstream
// server still upgrading) has run: its error must not promise "not
// executed", or the client interceptor would execute it again.
func TestAForwardedRefusalIsNotARefusalOfThisCall(t *testing.T) {
	downstream := upgrade.NewGate(upgrade.GateConfig{})
	_, refusal := grpcupgrade.UnaryServerInterceptor(downstream, nil)(context.Background(), nil,
		&grpc.UnaryServerInfo{FullMethod: "/b.B/Get"}, nil)
	require.ErrorIs(t, grpcupgrade.FromError(refusal), upgrade.ErrUpgradeInProgress, "the downstream refusal is ours")

	ours := upgrade.NewGate(upgrade.GateConfig{})
	ours.Complete()
	ran := 0
	_, err := grpcupgrade.UnaryServerInterceptor(ours, nil)(context.Background(), nil,
		&grpc.UnaryServerInfo{FullMethod: "/a.A/Put"}, func(context.Context, any) (any, error) {
			ran++
			return nil, refusal
		})
	assert.Equal(t, 1, ran)
	assert.Equal(t, codes.Unavailable, status.Code(err), "code and message pass through")
	assert.Equal(t, status.Convert(refusal).Message(), status.Convert(err).Message())
	assert.NotErrorIs(t, grpcupgrade.FromError(err), upgrade.ErrUpgradeInProgress, "but not as a refusal of this call")

	err = grpcupgrade.StreamServerInterceptor(ours, nil)(nil, nil, &grpc.StreamServerInfo{FullMethod: "/a.A/Watch"},
		func(any, grpc.ServerStream) error { return refusal })
	assert.NotErrorIs(t, grpcupgrade.FromError(err), upgrade.ErrUpgradeInProgress, "streams too")

	plain := errors.New("disk full")
	_, err = grpcupgrade.UnaryServerInterceptor(ours, nil)(context.Background(), nil,
		&grpc.UnaryServerInfo{FullMethod: "/a.A/Put"}, func(context.Context, any) (any, error) { return nil, plain })
	assert.Same(t, plain, err, "other errors are untouched")
}
