package grpcupgrade_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// uploads is grpc.testing's TestService with a real client-streaming
// handler that records every upload it executed.
type uploads struct {
	testpb.UnimplementedTestServiceServer
	mu       sync.Mutex
	executed [][]string
}

func (u *uploads) StreamingInputCall(ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	var got []string
	size := 0
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		got = append(got, string(req.GetPayload().GetBody()))
		size += len(req.GetPayload().GetBody())
	}
	u.mu.Lock()
	u.executed = append(u.executed, got)
	u.mu.Unlock()
	return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(size)})
}

func (u *uploads) uploads() [][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]string(nil), u.executed...)
}

// streamServer is a real grpc-go server with the upgrade interceptors,
// the health service (server streaming) and the test service (client
// streaming); streams counts the streams that reached it.
type streamServer struct {
	addr    string
	health  *health
	uploads *uploads
	streams atomic.Int64
}

func newStreamServer(t *testing.T, g *upgrade.Gate) *streamServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &streamServer{addr: l.Addr().String(), health: &health{executed: map[string]int{}}, uploads: &uploads{}}
	count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s.streams.Add(1)
		return handler(srv, ss)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(count, grpcupgrade.StreamServerInterceptor(g, nil)))
	healthpb.RegisterHealthServer(srv, s.health)
	testpb.RegisterTestServiceServer(srv, s.uploads)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return s
}

// streamClient dials s with the stream interceptor on clk; each wait it
// chooses is sent on waits.
func streamClient(t *testing.T, s *streamServer, clk *testclock.Clock, waits chan<- time.Duration) *grpc.ClientConn {
	opts := []upgrade.RetryOption{upgrade.WithClock(clk)}
	if waits != nil {
		opts = append(opts, upgrade.WithNotify(func(_ int, err error, wait time.Duration) {
			var ip *upgrade.InProgressError
			if assert.ErrorAs(t, err, &ip) {
				assert.Equal(t, ip.RetryAfter(), wait, "waits exactly the server's delay")
			}
			waits <- wait
		}))
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
		grpc.WithStreamInterceptor(grpcupgrade.StreamClientInterceptor(opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rideOut answers every wait on waits by advancing clk, completing g
// after the second refusal, until done says the call returned.
func rideOut(t *testing.T, clk *testclock.Clock, g *upgrade.Gate, waits <-chan time.Duration, done <-chan error) error {
	refusals := 0
	for {
		select {
		case wait := <-waits:
			if refusals++; refusals == 2 {
				g.Complete()
			}
			require.NoError(t, clk.WaitAdvance(wait, waitTimeout, 1))
		case err := <-done:
			assert.Equal(t, 2, refusals)
			return err
		}
	}
}

// A server-streaming call refused while the server upgrades is opened
// again, after exactly each pushback, inside its first Recv, which returns
// the first message of the admitted stream.
func TestStreamClientRetriesARefusedServerStream(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newStreamServer(t, g)
	waits := make(chan time.Duration)
	client := healthpb.NewHealthClient(streamClient(t, s, clk, waits))

	done := make(chan error, 1)
	go func() {
		stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			done <- err
			return
		}
		resp, err := stream.Recv()
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = errors.New("not the admitted stream's message")
		}
		done <- err
	}()
	require.NoError(t, rideOut(t, clk, g, waits, done))
	assert.Equal(t, int64(3), s.streams.Load(), "refused twice, admitted once")
	assert.Equal(t, int64(1), s.health.n.Load(), "executed once")
}

// A client-streaming upload refused before its handler ran is sent again,
// every message of it, in order, and executed exactly once.
func TestStreamClientResendsWhatARefusedStreamSent(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newStreamServer(t, g)
	waits := make(chan time.Duration)
	client := testpb.NewTestServiceClient(streamClient(t, s, clk, waits))

	done := make(chan error, 1)
	var size atomic.Int32
	go func() {
		stream, err := client.StreamingInputCall(context.Background())
		if err != nil {
			done <- err
			return
		}
		for _, part := range []string{"ab", "cde", "f"} {
			if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte(part)}}); err != nil {
				done <- err
				return
			}
		}
		resp, err := stream.CloseAndRecv()
		size.Store(resp.GetAggregatedPayloadSize())
		done <- err
	}()
	require.NoError(t, rideOut(t, clk, g, waits, done))
	assert.Equal(t, int32(6), size.Load())
	assert.Equal(t, [][]string{{"ab", "cde", "f"}}, s.uploads.uploads(), "executed once, whole")
}

func TestStreamClientStopsAtOnceOnFailure(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("upgrade steps: disk full"))
	s := newStreamServer(t, g)
	client := healthpb.NewHealthClient(streamClient(t, s, testclock.NewClock(t0), nil))
	stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Equal(t, int64(1), s.streams.Load())
}

func TestStreamClientCtxEndsTheWait(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newStreamServer(t, g)
	client := healthpb.NewHealthClient(streamClient(t, s, clk, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		done <- err
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1)) // waiting out the pushback
	cancel()
	err := <-done
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal is kept")
	assert.Equal(t, int64(1), s.streams.Load())
	assert.Zero(t, s.health.n.Load())
}

// An admitted stream is the plain stream: what it receives and how it ends
// pass through.
func TestStreamClientAdmittedStreamPassesThrough(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Complete()
	s := newStreamServer(t, g)
	client := healthpb.NewHealthClient(streamClient(t, s, testclock.NewClock(t0), nil))
	stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	resp, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	_, err = stream.Recv()
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, int64(1), s.streams.Load())
}

// FullDuplexCall echoes each request; it replies only after reading one.
func (u *uploads) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := ss.Recv()
		if err != nil {
			return nil
		}
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// A bidi stream with one goroutine in Recv and another sending: a message
// sent while Recv waits out a refusal is replayed on the reopened stream,
// and the echo reaches Recv (before the fix Recv held the stream's lock
// across the wait and the reopened stream's RecvMsg, and Send blocked on
// it for ever).
func TestStreamClientBidiSendDuringTheWait(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	s := newStreamServer(t, g)
	waits := make(chan time.Duration, 10)
	client := testpb.NewTestServiceClient(streamClient(t, s, clk, waits))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.FullDuplexCall(ctx)
	require.NoError(t, err)

	got := make(chan string, 1)
	go func() {
		resp, err := stream.Recv()
		assert.NoError(t, err)
		got <- string(resp.GetPayload().GetBody())
	}()
	wait := <-waits // Recv is waiting out the refusal
	sent := make(chan error, 1)
	go func() {
		sent <- stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("hi")}})
	}()
	select {
	case err := <-sent:
		require.NoError(t, err, "a send during the wait is kept for the replay")
	case <-time.After(waitTimeout):
		t.Fatal("Send blocked while Recv waited out the refusal")
	}
	g.Complete()
	require.NoError(t, clk.WaitAdvance(wait, waitTimeout, 1))
	select {
	case body := <-got:
		assert.Equal(t, "hi", body)
	case <-time.After(waitTimeout):
		t.Fatal("deadlock: the reopened stream never got the message sent during the wait")
	}
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, int64(2), s.streams.Load(), "refused once, admitted once")
}

// upload sends parts on a new StreamingInputCall, as grpc-go asks (on
// io.EOF from Send, the status comes from CloseAndRecv), and returns the
// call's error.
func upload(ctx context.Context, client testpb.TestServiceClient, parts ...[]byte) error {
	stream, err := client.StreamingInputCall(ctx)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: p}}); err == io.EOF {
			break // the server ended the stream: CloseAndRecv says why
		} else if err != nil {
			return err
		}
	}
	_, err = stream.CloseAndRecv()
	return err
}

// A stream that sends more than the replay bounds (64 messages, 4 MiB of
// them) before receiving is committed: it is not retried, and the refusal
// reaches CloseAndRecv as FromError's error, as documented.
func TestStreamClientBeyondTheReplayBoundsIsNotRetried(t *testing.T) {
	for name, parts := range map[string][][]byte{
		"bytes":    {make([]byte, 3<<20), make([]byte, 3<<20)}, // 6 MiB in two messages
		"messages": make([][]byte, 65),
	} {
		t.Run(name, func(t *testing.T) {
			g := upgrade.NewGate(upgrade.GateConfig{})
			s := newStreamServer(t, g)
			client := testpb.NewTestServiceClient(streamClient(t, s, testclock.NewClock(t0), nil))
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			err := upload(ctx, client, parts...)
			assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "FromError's error once committed")
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Equal(t, int64(1), s.streams.Load(), "not retried")
			assert.Empty(t, s.uploads.uploads())
		})
	}
}
