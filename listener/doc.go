// Package listener provides a gated dual net.Listener that lets a
// controller start before the herd arrives.
//
// A restarting controller with thousands of agents is flooded before its
// own workers are up, because it talks to itself (and its peers talk to
// it) over the same port the agents dial. A Listener has two ports: the
// controller port accepts from New; the public API port is bound and
// opened by OpenAPI only once the controller is stable, and it alone is
// rate-limited and capped, in its own accept goroutine, so controller
// traffic never queues behind agents. Accept coalesces both, so the
// Listener drops into http.Server unchanged. Bound addresses are reported
// through Config.OnBound, so tests use port 0 instead of racing for "free"
// ports.
//
// Usage sketch:
//
//	l, err := listener.New(listener.Config{
//		ControllerAddr: ":17071", // also dialled by the peer controllers
//		APIAddr:        ":17070",
//		APIRate:        2000, // agents per second
//	})
//	if err != nil { ... }
//	srv := &http.Server{Handler: h, ConnContext: listener.ConnContext}
//	go srv.Serve(l)             // controller port only, for now
//	<-stable                     // e.g. a gate unlocked by the peer grouper
//	if err := l.OpenAPI(); err != nil { ... } // now the agents
//
// In a handler, listener.PortFromContext(r.Context()) tells which port a
// request came in on, e.g. to refuse agent logins on the controller port.
//
// # Opening the API port when stable
//
// OpenAPIWhen takes the channel the controller waits on (a gate's
// Unlocked()) and opens the API port when it closes, so no goroutine of
// yours waits for it; it may be called once the rest of startup is built,
// the self-dial of a Dialer made for the controller port included. A bind
// failure is not lost: Failed closes and Cause (and Report().API.OpenErr)
// says why, while the controller port serves on; Completed closes once the
// port is open. With Detail, these make the API port a gate.Component
// (without this package importing gate), so a readiness board shows it in
// its own words, the bind error included:
//
//	err = l.OpenAPIWhen("stable", stable.Unlocked())
//	board.Follow("api-port", l) // [-]api-port locked for 2s (opens once stable)
//	                            // [-]api-port failed: listener: bind api port ...: address already in use
//
// # Logs and counts
//
// With Config.Logger set, the listener logs each transition of a port
// (bound, opened, closed, failed to open, accept failed) as one record;
// the repository's catalogue (docs/catalogue.md) lists them. Nothing is logged after
// Close has returned.
// Connections are counted, never logged: Report has the counts per port,
// cumulative — Accepted, RateLimited, Refused, TemporaryErrors — beside
// Throttled (the time waited) and Conns (open now), and the metrics module
// exports them. The accept path never touches the logger: a count is an
// atomic add.
//
// # HTTP and gRPC on one listener
//
// gRPC clients speak HTTP/2; over plain TCP that is h2c with prior
// knowledge, which net/http's server speaks once asked to. Route requests
// with a gRPC content type to grpc-go's (*grpc.Server).ServeHTTP:
//
//	var protocols http.Protocols
//	protocols.SetHTTP1(true)
//	protocols.SetUnencryptedHTTP2(true) // with TLS: SetHTTP2, and ServeTLS
//	srv := &http.Server{Protocols: &protocols, ConnContext: listener.ConnContext,
//		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
//				grpcServer.ServeHTTP(w, r)
//				return
//			}
//			mux.ServeHTTP(w, r)
//		})}
//	go srv.Serve(l)
//
// The runnable example is in github.com/coldstart-go/coldstart/dialer/grpcdialer
// (this module does not import grpc). ServeHTTP runs gRPC on net/http's
// HTTP/2 server, not grpc-go's own: grpc-go marks it experimental and says
// some features and performance differ. A process that needs grpc-go's
// transport serves gRPC on a listener of its own.
package listener
