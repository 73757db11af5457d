// Package dialer chooses and dials the controller address for an agent's API
// client: its own controller (literal loopback) once that server is ready,
// peer controllers before that. The incident it answers, and why "local
// only" follows an observed readiness signal rather than the role (enable-ha
// would deadlock), are in README.md.
//
// The default policy, RequireLocalWhenReady: before Config.LocalReady
// closes a Dial waits LocalReadyGrace for the local server and then falls
// back to the peers; once it has closed, every Dial goes to loopback only,
// retrying with backoff until ctx ends. A caller holding a peer connection
// learns from Route.LocalReady when to move.
//
// # Moving home
//
// Two adapters move a pooled client home when LocalReady closes, with no
// request failing on the way: Transport, an http.RoundTripper (see
// NewTransport), and grpcdialer.NewClient (module
// github.com/coldstart-go/coldstart/dialer/grpcdialer), a grpc.ClientConn.
// The Dialer has moved home at its first connection to this machine's
// controller once LocalReady has closed; it has the shape of
// gate.Component, so board.Follow("self-dial", d) opens then, and nothing
// needs to ping the local server.
//
// # Logs and counts
//
// With Config.Logger set, a Dialer logs its route each time it changes,
// and for a peer of a machine that has a controller why it fell back
// (docs/catalogue.md has the record and its keys), from the call that
// changed it: a Dialer has nothing to flush and no Close. Calls are
// counted, never logged (Report). A call that ends because its ctx did
// logs nothing.
package dialer
