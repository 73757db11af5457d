package grpcupgrade_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

const waitTimeout = 10 * time.Second // how long a test waits for a timer to be armed

// health is a real generated gRPC service (grpc.health.v1) whose handlers
// count what they executed, by the request-id metadata of each call.
type health struct {
	healthpb.UnimplementedHealthServer
	mu       sync.Mutex
	executed map[string]int
	n        atomic.Int64
}

func (h *health) record(ctx context.Context) {
	h.n.Add(1)
	id := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md["request-id"]) > 0 {
		id = md["request-id"][0]
	}
	h.mu.Lock()
	h.executed[id]++
	h.mu.Unlock()
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.record(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.record(ss.Context())
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// attempts counts the calls that reached the server (refused or not), and
// when each arrived; it runs outside the upgrade interceptor, and calls
// onRefusal after each refusal with how many there have been.
type attempts struct {
	mu        sync.Mutex
	at        []time.Time
	refused   int
	onRefusal func(refused int)
}

func (a *attempts) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a.mu.Lock()
	a.at = append(a.at, time.Now())
	a.mu.Unlock()
	resp, err := handler(ctx, req)
	if grpcupgrade.FromError(err) != err {
		a.mu.Lock()
		a.refused++
		n, f := a.refused, a.onRefusal
		a.mu.Unlock()
		if f != nil {
			f(n)
		}
	}
	return resp, err
}

func (a *attempts) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// server is a real grpc-go server on loopback TCP with the upgrade
// interceptors; allow is their allowlist.
type server struct {
	addr     string
	health   *health
	attempts *attempts
}

func newServer(t testing.TB, g *upgrade.Gate, allow func(string) bool) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &server{addr: l.Addr().String(), health: &health{executed: map[string]int{}}, attempts: &attempts{}}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.attempts.unary, grpcupgrade.UnaryServerInterceptor(g, allow)),
		grpc.StreamInterceptor(grpcupgrade.StreamServerInterceptor(g, allow)),
	)
	healthpb.RegisterHealthServer(srv, s.health)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return s
}

// benchClient is a client of a real server with nothing but the upgrade
// interceptors (withGate) or no interceptor at all.
func benchClient(b *testing.B, g *upgrade.Gate, withGate bool) healthpb.HealthClient {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	var opts []grpc.ServerOption
	if withGate {
		opts = append(opts, grpc.UnaryInterceptor(grpcupgrade.UnaryServerInterceptor(g, nil)),
			grpc.StreamInterceptor(grpcupgrade.StreamServerInterceptor(g, nil)))
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, &health{executed: map[string]int{}})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	b.Cleanup(func() { srv.Stop(); <-done })
	return dial(b, &server{addr: l.Addr().String()})
}

// dial connects a real grpc-go client to s.
func dial(t testing.TB, s *server, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// retryPolicy is a built-in retry service config for the health service:
// 5 attempts (grpc-go's cap), a backoff of ~1 ms that only a pushback can
// lengthen, and both refusal codes retryable so that only the pushback of
// -1 can stop a retry of a failed upgrade.
const retryPolicy = `{"methodConfig": [{
	"name": [{"service": "grpc.health.v1.Health"}],
	"retryPolicy": {
		"maxAttempts": 5,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.002s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["UNAVAILABLE", "FAILED_PRECONDITION"]
	}
}]}`
