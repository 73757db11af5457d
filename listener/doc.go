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
package listener
