// Package grpcdialer moves a gRPC ClientConn home: it dials through a
// coldstart dialer.Dialer, and when the Dialer's LocalReady closes it hands
// the ClientConn the local controller's address, so that gRPC connects
// there and drains the peer connection itself.
//
// A ClientConn cannot be closed under its RPCs and grpc-go keeps a healthy
// connection for ever, so the move comes from its resolver (why: package
// dialer's DESIGN.md, "gRPC").
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
// The Dialer's Completed closes at the client's first connection to this
// machine's controller once LocalReady has closed; a board follows the
// Dialer, so a self-dial gate needs no health-check call.
//
// The ClientConn's authority is Authority ("controller"), which names no
// host: with TLS, give the server name the controllers' certificates carry
// in tls.Config.ServerName, as above, or with grpc.WithAuthority (which
// also sets the RPCs' :authority); otherwise every handshake fails with
// "certificate is valid for ..., not controller". Under RequireLocal, or
// without a local controller (LocalPort 0), the ClientConn never moves.
package grpcdialer
