package listener

import (
	"context"
	"net"
)

// PortOf returns the port a connection came in on, or 0 if it is not a
// connection of a Listener. It sees through wrappers that expose the inner
// connection with a NetConn method, such as *tls.Conn.
func PortOf(c net.Conn) Port {
	// Bounded, so a wrapper whose NetConn returns itself cannot loop.
	for range 8 {
		switch x := c.(type) {
		case *conn:
			return x.state.port
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return 0
		}
	}
	return 0
}

type portKey struct{}

// ConnContext records a connection's port in its context. Set it as an
// http.Server's ConnContext, then read the port in a handler with
// PortFromContext — for example to refuse agent logins on the controller
// port:
//
//	srv := &http.Server{Handler: h, ConnContext: listener.ConnContext}
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, portKey{}, PortOf(c))
}

// PortFromContext returns the port stored by ConnContext, or 0 if none.
func PortFromContext(ctx context.Context) Port {
	p, _ := ctx.Value(portKey{}).(Port)
	return p
}
