// Package grpcdialer moves a gRPC ClientConn home: it dials through a
// coldstart dialer.Dialer, and when the Dialer's LocalReady closes it hands
// the ClientConn the local controller's address, so that gRPC connects
// there and drains the peer connection itself, failing no RPC in flight.
// A ClientConn cannot be closed under its RPCs and grpc-go keeps a healthy
// connection for ever, so the move comes from its resolver (why: package
// dialer's DESIGN.md, "gRPC"). ExampleNewClient, and the dialer module's
// README.md, show the use.
//
// The Dialer's Completed closes at the client's first connection to this
// machine's controller once LocalReady has closed; a board follows the
// Dialer (board.Follow("self-dial", d)), so a self-dial gate needs no
// health-check call. With TLS, set the server name the controllers'
// certificates carry (see Authority). Under RequireLocal, or without a
// local controller (LocalPort 0), the ClientConn never moves.
package grpcdialer
