package grpcupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// A draining gRPC server: once the drain signal closes (a board's drain)
// and its grace has passed, new calls are refused, saying whether a ready
// peer can serve, and the health service, still allowlisted, reports
// NOT_SERVING. GracefulStop then sends the GOAWAY and lets calls in flight
// finish.
func Example_drain() {
	drain := make(chan struct{})
	hs := grpchealth.NewServer()
	g := upgrade.NewGate(upgrade.GateConfig{
		PeerReady: func() bool { return true }, // e.g. a peer's readiness as this process sees it
		OnTransition: func(_, to upgrade.Phase, _ error) {
			if to == upgrade.PhaseDraining {
				hs.Shutdown() // every service NOT_SERVING
			}
		},
	})
	g.Complete()
	drained := make(chan error, 1)
	go func() { drained <- g.Drain(context.Background(), drain, 0) }()
	allow := grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcupgrade.UnaryServerInterceptor(g, allow)))
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	conn, _ := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	close(drain)
	<-drained
	resp, _ := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus())
	_, err := client.List(context.Background(), &healthpb.HealthListRequest{})
	err = grpcupgrade.FromError(err)
	var ip *upgrade.InProgressError
	fmt.Println(status.Code(err), errors.As(err, &ip) && ip.Phase == upgrade.PhaseDraining, ip.PeerReady)
	// Output:
	// NOT_SERVING
	// Unavailable true true
}
