// Package grpcdialer moves a gRPC ClientConn home: it dials through a
// coldstart dialer.Dialer, and when the Dialer's LocalReady closes it hands
// the ClientConn the local controller's address, so that gRPC connects
// there and drains the peer connection itself.
package grpcdialer
