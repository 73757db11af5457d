// Package grpcupgrade puts an upgrade.Gate in front of a gRPC server, and
// lets gRPC clients wait an upgrade out: the same gate, the same promise
// (a refused call was not executed), in gRPC's own terms.
//
// The server interceptors refuse before the handler runs, with
// codes.Unavailable and a pushback that grpc-go's built-in retry waits out
// (a failed upgrade: codes.FailedPrecondition, pushback -1, so it stops).
// The client interceptors retry refusals with upgrade.Retry for as long as
// ctx allows. The reasons are in upgrade/DESIGN.md, "grpcupgrade".
//
// Server:
//
//	g := upgrade.NewGate(upgrade.GateConfig{})
//	allow := grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName)
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(grpcupgrade.UnaryServerInterceptor(g, allow)),
//		grpc.StreamInterceptor(grpcupgrade.StreamServerInterceptor(g, allow)),
//	)
//	// ... run the steps, then g.Complete() (or g.Fail(err))
//
// Client:
//
//	conn, err := grpc.NewClient(addr, creds,
//		grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor()),
//		grpc.WithStreamInterceptor(grpcupgrade.StreamClientInterceptor()))
//	// calls refused during the upgrade are retried; errors.Is(err,
//	// upgrade.ErrUpgradeFailed) once it failed; status.Code(err) still works
//
// A client without the interceptor turns a refusal into an upgrade error
// with FromError.
//
// The server interceptors decide each call with upgrade.Gate.Admit, so HTTP
// and gRPC calls add up in the gate's Report().Calls. Nothing here logs:
// the client interceptors take upgrade.Retry's options.
package grpcupgrade
