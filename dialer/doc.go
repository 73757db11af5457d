// Package dialer chooses and dials the controller address for an agent's API
// client: its own controller (literal loopback) once that server is ready,
// peer controllers before that.
//
// It answers an incident in an HA controller upgrade: a controller
// restarted with new agent binaries, and its own API client started before
// its own API server was listening. The client preferred localhost, found
// nothing there yet and, rather than wait the second it took, connected to
// a peer controller, piling startup load on the other controllers.
// Requiring localhost as soon as the agent knows it is a controller
// deadlocks enable-ha instead: a new controller cannot serve until a peer
// has admitted it, and it cannot report itself to that peer if it may dial
// only itself. The default policy, RequireLocalWhenReady, ties "local
// only" to an observed readiness signal (Config.LocalReady), never to the
// role: before the local server is ready a Dial waits LocalReadyGrace for
// it and then falls back to the peers; once it is ready, every Dial goes to
// loopback only, retrying with backoff until ctx ends. A caller holding a
// peer connection learns from Route.LocalReady when to move.
//
// Usage sketch:
//
//	d, err := dialer.New(dialer.Config{
//		LocalPort:  17071, // the controller port, as in listener's sketch
//		Remote:     func() []string { return peerControllerAddrs() },
//		LocalReady: apiServerServing, // <-chan struct{}, closed once serving
//	})
//	...
//	for {
//		conn, route, err := d.Dial(ctx)
//		if err != nil {
//			return err // names every address tried and wraps ctx.Err()
//		}
//		serve(conn) // until the conn drops, or until <-route.LocalReady
//		            // when !route.Local: then close it and dial again
//	}
//
// # Moving home
//
// A client that pools its connections cannot close one under a request in
// flight, and a pool that keeps a peer connection idle reuses it after the
// local server is ready. Two adapters move home for you when LocalReady
// closes, with no request failing on the way. Transport, an
// http.RoundTripper, sends new requests to a fresh pool (hence local),
// closes the idle peer connections at once and a busy one after its
// request:
//
//	tr, err := dialer.NewTransport(d, nil) // nil: http.DefaultTransport's settings
//	client := &http.Client{Transport: tr}
//	resp, err := client.Get("https://controller/api") // the host names the service
//
// For gRPC, grpcdialer.NewClient (module
// github.com/coldstart-go/coldstart/dialer/grpcdialer) returns a
// grpc.ClientConn whose resolver hands it the local address, so that gRPC
// connects there and drains the peer connection itself.
//
// The Dialer has moved home at its first connection to this machine's
// controller once LocalReady has closed, and a readiness board follows it
// as it is (it has the shape of gate.Component): board.Follow("self-dial",
// d) opens then, and says meanwhile what it waits for; nothing needs to
// ping the local server. Home, on a Transport or grpcdialer's Client, is
// the same moment for that one client.
//
// # Logs and counts
//
// With Config.Logger set, a Dialer logs its route each time it changes,
// and for a peer of a machine that has a controller why it fell back (the
// repository's catalogue, docs/catalogue.md, has the record and its keys). The record
// is written by the call that changed the route, so a Dialer has nothing
// to flush and no Close. Calls are counted, never logged: Report has
// LocalDials, PeerDials, Fallbacks and Failures, cumulative, and the
// metrics module exports them. A call that ends because its ctx did (its
// owner cancelled it) logs nothing.
package dialer
