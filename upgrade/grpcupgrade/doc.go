// Package grpcupgrade puts an upgrade.Gate in front of a gRPC server, and
// lets gRPC clients wait an upgrade out: the same gate, the same promise
// (a refused call was not executed), in gRPC's own terms.
//
// Until its upgrade steps have run and it knows it needs no new agent
// binaries, a server should serve only a few calls and refuse the rest in
// a way clients recognise and can retry safely; in the incident this
// answers, clients could only string-match "upgrade in progress" and sleep
// 1 s × 60. The server interceptors refuse before the handler runs, with
// codes.Unavailable, an errdetails.ErrorInfo (Domain "coldstart", Reason
// UPGRADE_IN_PROGRESS, the phase in its metadata), an errdetails.RetryInfo
// and the trailer grpc-retry-pushback-ms, so grpc-go's built-in retry
// policy waits the pushback out; a failed upgrade is
// codes.FailedPrecondition, Reason UPGRADE_FAILED, pushback -1, so it stops.
// Built-in retry gives up after 5 attempts; UnaryClientInterceptor retries
// refusals with upgrade.Retry for as long as ctx allows, and
// StreamClientInterceptor does the same for streams: a refused stream is
// opened again, and what the client sent on it sent again, until a message
// is received. Clients wait exactly the server's delay, which the server
// drew from [R, 2R]: one jitter.
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
// The server interceptors decide each call with upgrade.Gate.Admit, the
// gate's one per-call guard, as upgrade.Middleware does, so HTTP and gRPC
// calls add up in one place, the gate's Report().Calls. Nothing here logs:
// the client interceptors take upgrade.Retry's options (WithClock,
// WithNotify, the one hook; a nil option is ignored).
//
// A stream not yet admitted keeps what it sent, to send it again: up to
// 64 messages and 4 MiB of them (proto.Size) per stream, until its first
// message is received. A stream that sends more first is no longer
// retried (see StreamClientInterceptor).
package grpcupgrade
