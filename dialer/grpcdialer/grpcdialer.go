package grpcdialer

import (
	"context"
	"net"
	"slices"
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

// The resolver's two addresses, before and after LocalReady closes. The
// Dialer picks the real one; they differ so that the ClientConn leaves its
// connection for a new one at the move.
var (
	anyRoute   = resolver.Address{Addr: "dialer:any"}
	localRoute = resolver.Address{Addr: "dialer:local"}
)

// Client is a gRPC ClientConn: use it as one (generated clients take it,
// Close closes it). The Dialer's Completed says when it has moved home.
type Client struct {
	*grpc.ClientConn
}

// NewClient returns a gRPC Client whose connections d dials, that moves
// home when d's LocalReady closes. Until then the ClientConn holds
// the connection the Dialer gave it (a peer's, before this machine's
// controller serves); when LocalReady closes, its resolver reports a new
// address, and gRPC connects anew (the Dialer now dials loopback only) and
// drains the old connection itself: RPCs in flight on it run to their end,
// new RPCs wait for the local connection (they are not failed), and the
// ClientConn is never closed under them. Under RequireLocal, or with
// LocalPort 0, it never moves.
//
// opts are given to grpc.NewClient before NewClient's own resolver and
// context dialer, which win (change how connections are made in the
// Dialer's Config.DialContext); transport credentials come in opts; a nil
// option is ignored. With TLS, set the server name (see Authority). Close
// the ClientConn as usual; that also stops the resolver. A nil d is an
// error satisfying errors.Is(err, errors.NotValid) (github.com/juju/errors).
func NewClient(d *dialer.Dialer, opts ...grpc.DialOption) (*Client, error) {
	if d == nil {
		return nil, jujuerrors.NotValidf("nil Dialer")
	}
	ready := d.LocalReady()
	if d.Policy() == dialer.RequireLocal {
		ready = nil // local from the first connection: nowhere to move
	}
	all := append(slices.DeleteFunc(slices.Clone(opts), func(o grpc.DialOption) bool { return o == nil }),
		grpc.WithResolvers(&builder{ready: ready}),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, _, err := d.Dial(ctx)
			return conn, err
		}),
	)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, err
	}
	return &Client{ClientConn: cc}, nil
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
		addr := localRoute // LocalReady has closed
		if b.ready == nil {
			addr = anyRoute // it never moves
		}
		return r, cc.UpdateState(resolver.State{Addresses: []resolver.Address{addr}})
	}
	if err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{anyRoute}}); err != nil {
		close(r.exited)
		return nil, err
	}
	go r.watch(b, cc)
	return r, nil
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
