// Package grpcdialer moves a gRPC ClientConn home: it dials through a
// coldstart dialer.Dialer, and when the Dialer's LocalReady closes it hands
// the ClientConn the local controller's address, so that gRPC connects
// there and drains the peer connection itself.
//
// It answers the incident package dialer answers, for gRPC clients: in an
// HA controller upgrade a controller's own API client started before its
// own API server listened, connected to a peer controller, and stayed
// there, piling startup load on the other controllers. A Dialer waits for
// the local server a while and then falls back to a peer (requiring
// localhost from the start deadlocks enable-ha); a pooled client must then
// leave that peer once the local server is ready, without failing the
// RPCs in flight. A ClientConn cannot be closed under its RPCs, and
// grpc-go keeps a healthy connection for ever, so the move has to come
// from its resolver: NewClient's reports a new address when LocalReady
// closes, gRPC connects anew (the Dialer now dials loopback only), new
// RPCs wait for that connection, and the peer connection closes once its
// RPCs have ended.
//
// Usage sketch:
//
//	d, err := dialer.New(dialer.Config{
//		LocalPort:  17071, // the controller port
//		Remote:     func() []string { return peerControllerAddrs() },
//		LocalReady: apiServerServing, // <-chan struct{}, closed once serving
//	})
//	...
//	creds := credentials.NewTLS(&tls.Config{
//		RootCAs:    controllerCAs,
//		ServerName: "juju-apiserver", // the name in the controllers' certificates
//	})
//	cc, err := grpcdialer.NewClient(d, grpc.WithTransportCredentials(creds))
//	...
//	defer cc.Close()
//	client := pb.NewControllerClient(cc) // use it as any ClientConn
//	board.Follow("self-dial", d)         // opens once d has moved home
//
// NewClient returns a *Client, a *grpc.ClientConn with Home: a channel
// closed at its first connection to this machine's controller once
// LocalReady has closed (never at one to a peer). The Dialer has moved
// home then too, and a readiness board follows the Dialer itself, so a
// self-dial gate needs no health-check call and no goroutine of yours.
//
// The ClientConn's authority is Authority ("controller"), which names no
// host: with TLS, give the server name the controllers' certificates carry
// in tls.Config.ServerName, as above, or with grpc.WithAuthority (which
// also sets the RPCs' :authority); otherwise every handshake fails with
// "certificate is valid for ..., not controller". Under RequireLocal, or
// without a local controller (LocalPort 0), the ClientConn never moves.
package grpcdialer
