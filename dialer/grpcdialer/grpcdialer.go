package grpcdialer

import (
	"context"
	"net"
	"sync"

	jujuerrors "github.com/juju/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"github.com/coldstart-go/coldstart/dialer"
)

// target is what NewClient gives grpc.NewClient; its authority,
// "controller", is the ClientConn's default :authority and TLS server name
// (see NewClient).
const target = scheme + ":///" + Authority

const scheme = "coldstart-dialer"

// Authority is the ClientConn's default authority: the :authority of its
// RPCs and, with TLS transport credentials, the server name its
// handshakes verify the certificate against. It names no host (the
// Dialer picks the address), so a TLS client sets the name its
// controllers' certificates carry: tls.Config.ServerName in its
// credentials, or grpc.WithAuthority (which changes :authority too).
const Authority = "controller"

// The two addresses the resolver reports. Neither is dialled as such: the
// Dialer picks the real one. What matters is that they differ, so that the
// ClientConn leaves the connection it has for a new one when LocalReady
// closes.
var (
	// anyRoute is the address before LocalReady closes: the Dialer may go
	// to a peer (it waits out LocalReadyGrace first).
	anyRoute = resolver.Address{Addr: "dialer:any"}
	// localRoute is the address after it: the Dialer goes local only
	// (under RequireLocalWhenReady; PreferLocal still falls back).
	localRoute = resolver.Address{Addr: "dialer:local"}
)

// Client is a gRPC ClientConn (use it as one: generated clients take it,
// Close closes it) that says when it has moved home.
type Client struct {
	*grpc.ClientConn

	home     chan struct{} // see Home; nil with no local controller
	homeOnce sync.Once
}

// Home returns a channel that is closed when the Client has moved home: at
// the first connection it makes to this machine's controller once
// LocalReady has closed (never at one to a peer): this client's move, where
// a board's "self-dial" entry follows the Dialer's (the first of its
// clients to connect home). It is nil when the Dialer's LocalPort is 0.
func (c *Client) Home() <-chan struct{} { return c.home }

// NewClient returns a gRPC Client whose connections d dials, that moves
// home when d's LocalReady closes. Until then the ClientConn holds
// the connection the Dialer gave it (a peer's, before this machine's
// controller serves); when LocalReady closes, its resolver reports a new
// address, and gRPC connects anew (the Dialer now dials loopback only) and
// drains the old connection itself: RPCs in flight on it run to their end,
// new RPCs wait for the local connection (they are not failed), and the
// ClientConn is never closed under them. Home closes at the first local
// connection after LocalReady (the Dialer's Logger has the route change).
//
// Under RequireLocal every connection is local already: the ClientConn
// never moves, and LocalReady closing changes nothing (as with
// dialer.NewTransport). Without a local controller (LocalPort 0) it never
// moves either.
//
// opts are given to grpc.NewClient before NewClient's own two, a resolver
// and a context dialer, which therefore win: the Dialer's Config.DialContext
// is the place to change how connections are made, and transport
// credentials (required by grpc) come in opts; a nil option is ignored.
// The ClientConn's authority
// is Authority, "controller": with TLS credentials, set
// tls.Config.ServerName (or grpc.WithAuthority) to the name in the
// controllers' certificates, or every handshake fails with "certificate
// is valid for ..., not controller". Close the ClientConn as usual; that
// also stops the resolver. A nil d is reported as an error satisfying
// errors.Is(err, errors.NotValid) (github.com/juju/errors).
func NewClient(d *dialer.Dialer, opts ...grpc.DialOption) (*Client, error) {
	if d == nil {
		return nil, jujuerrors.NotValidf("nil Dialer")
	}
	c := &Client{}
	if d.Completed() != nil {
		c.home = make(chan struct{})
	}
	ready := d.LocalReady()
	if d.Policy() == dialer.RequireLocal {
		ready = nil // local from the first connection: nowhere to move
	}
	all := make([]grpc.DialOption, 0, len(opts)+2)
	for _, o := range opts {
		if o != nil {
			all = append(all, o)
		}
	}
	all = append(all,
		grpc.WithResolvers(&builder{ready: ready}),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, r, err := d.Dial(ctx)
			if err == nil && r.Local && isClosed(r.LocalReady) {
				c.homeOnce.Do(func() { close(c.home) })
			}
			return conn, err
		}),
	)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, err
	}
	c.ClientConn = cc
	return c, nil
}

// builder builds the resolver of one ClientConn (again after it leaves
// idle mode).
type builder struct {
	ready <-chan struct{} // nil: never moves (no local controller, or RequireLocal)
}

func (b *builder) Scheme() string { return scheme }

func (b *builder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	r := &moveResolver{quit: make(chan struct{}), exited: make(chan struct{})}
	if b.ready == nil || isClosed(b.ready) {
		close(r.exited)
		return r, cc.UpdateState(resolver.State{Addresses: []resolver.Address{b.route()}})
	}
	if err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{anyRoute}}); err != nil {
		close(r.exited)
		return nil, err
	}
	go r.watch(b, cc)
	return r, nil
}

// route is the address for a resolver built once LocalReady has closed,
// or that never moves (anyRoute).
func (b *builder) route() resolver.Address {
	if b.ready == nil {
		return anyRoute
	}
	return localRoute
}

// moveResolver reports anyRoute, then localRoute once LocalReady closes.
type moveResolver struct {
	quit     chan struct{}
	quitOnce sync.Once
	exited   chan struct{} // closed when watch has returned (or never ran)
}

func (r *moveResolver) watch(b *builder, cc resolver.ClientConn) {
	defer close(r.exited)
	select {
	case <-b.ready:
		// The balancer (pick_first, or any other) drops the anyRoute
		// SubConn, which closes its transport gracefully.
		_ = cc.UpdateState(resolver.State{Addresses: []resolver.Address{localRoute}})
	case <-r.quit:
	}
}

// ResolveNow does nothing: the addresses change only when LocalReady
// closes.
func (r *moveResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close stops the resolver and waits for its goroutine; gRPC calls it once
// the ClientConn no longer uses it, and never calls cc after.
func (r *moveResolver) Close() {
	r.quitOnce.Do(func() { close(r.quit) })
	<-r.exited
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
