package grpcupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// A gRPC server upgrading for a moment, and two clients: one with the
// retrying interceptor, which waits the upgrade out, and a plain one,
// which sees the refusal.
func Example() {
	g := upgrade.NewGate(upgrade.GateConfig{}) // refusing from the start: PhaseChecking
	_ = g.SetRetryAfter(20 * time.Millisecond)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcupgrade.UnaryServerInterceptor(g, nil)))
	healthpb.RegisterHealthServer(srv, &health{executed: map[string]int{}})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	plain, _ := grpc.NewClient(l.Addr().String(), creds)
	defer plain.Close()
	_, err := healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{})
	err = grpcupgrade.FromError(err)
	fmt.Println(status.Code(err), errors.Is(err, upgrade.ErrUpgradeInProgress))

	retrying, _ := grpc.NewClient(l.Addr().String(), creds,
		grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor()))
	defer retrying.Close()
	time.AfterFunc(50*time.Millisecond, g.Complete)
	resp, err := healthpb.NewHealthClient(retrying).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)

	g.Fail(errors.New("ignored: the epoch has completed"))
	_ = g.Enter(upgrade.PhaseRunningSteps)
	g.Fail(errors.New("upgrade step 7: disk full"))
	_, err = healthpb.NewHealthClient(retrying).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(status.Code(err) == codes.FailedPrecondition, err)
	// Output:
	// Unavailable true
	// SERVING <nil>
	// true upgrade failed: upgrade step 7: disk full; call not executed
}

// A server-streaming call during a short upgrade: the stream is refused
// before its handler runs, opened again after the server's delay by the
// stream interceptor, and its first Recv returns the admitted stream's
// first message.
func ExampleStreamClientInterceptor() {
	g := upgrade.NewGate(upgrade.GateConfig{}) // refusing from the start: PhaseChecking
	_ = g.SetRetryAfter(20 * time.Millisecond)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer(grpc.StreamInterceptor(grpcupgrade.StreamServerInterceptor(g, nil)))
	healthpb.RegisterHealthServer(srv, &health{executed: map[string]int{}})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	conn, _ := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(grpcupgrade.StreamClientInterceptor(
			upgrade.WithNotify(func(attempt int, err error, _ time.Duration) {
				fmt.Println("refused:", errors.Is(err, upgrade.ErrUpgradeInProgress))
				g.Complete() // the upgrade ends while the client waits
			}))))
	defer conn.Close()
	stream, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := stream.Recv()
	fmt.Println(resp.GetStatus(), err)
	// Output:
	// refused: true
	// SERVING <nil>
}
