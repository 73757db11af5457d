// Package listener provides a gated dual net.Listener that lets a
// controller start before the herd arrives (the why: README.md).
//
// A Listener has two ports: the controller port accepts from New; the
// public API port is bound and opened by OpenAPI only once the controller
// is stable, and it alone is rate-limited and capped, in its own accept
// goroutine, so controller traffic never queues behind agents. Accept
// coalesces both, so the Listener drops into http.Server unchanged. In a
// handler, PortFromContext (with ConnContext set on the server) tells
// which port a request came in on. Config.OnBound reports bound addresses,
// so tests use port 0.
//
// OpenAPIWhen opens the API port when a channel (a gate's Unlocked())
// closes. With Completed, Failed, Cause and Detail the API port is a
// gate.Component (without this package importing gate):
// board.Follow("api-port", l) shows it, a bind error included.
//
// With Config.Logger set, each transition of a port is one record
// (docs/catalogue.md lists them); nothing is logged after Close has
// returned. Connections are counted, never logged (Report); the accept
// path never touches the logger.
//
// HTTP and gRPC can share the Listener (h2c through net/http's server and
// grpc-go's ServeHTTP): README.md, "HTTP and gRPC on one listener", and the
// runnable example in github.com/coldstart-go/coldstart/dialer/grpcdialer.
package listener
