package dialer

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	jujuerrors "github.com/juju/errors"
)

// Transport is an http.RoundTripper that sends every request to the
// controller its Dialer picks, and moves home when Config.LocalReady
// closes: from then on new requests go to this machine's own controller,
// the idle connections to peers are closed at once, and a connection busy
// with a request (or an upgraded connection, such as a websocket) is left
// to finish it and closed only after. No request fails because of the
// move. (The Dialer's Completed and Logger say when it has moved.)
//
// The request's URL names the service, not the machine: its host is sent
// as the Host header (and, over https, checked against the certificate),
// but the connection goes where the Dialer says. For the same reason
// proxies are not used.
//
// A Transport needs no Close: its one goroutine, waiting for LocalReady,
// ends when its last peer connection closes (CloseIdleConnections closes
// the idle ones). How it moves: DESIGN.md, "Transport".
//
// A Transport is safe for concurrent use.
type Transport struct {
	d     *Dialer
	ready <-chan struct{} // LocalReady; nil if there is nothing to move to

	// before serves requests until the move, after from then on. before
	// is nil if LocalReady was already closed (or nil) at NewTransport.
	before, after *http.Transport
	moved         atomic.Bool
	// inflight counts requests sent on before, from RoundTrip until their
	// response body ends (its ordering with moved: DESIGN.md, "Transport").
	inflight atomic.Int64

	mu    sync.Mutex
	conns map[*beforeConn]struct{} // before's open connections
	empty chan struct{}            // closed when conns empties; nil while no watcher runs
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport whose connections d dials. base gives
// every other setting (TLS, timeouts, pool sizes, HTTP/2); nil means
// http.DefaultTransport's. base's Proxy and dial functions are ignored,
// and base itself is not modified. A nil d, or a Dialer not made by New,
// is reported as an error satisfying errors.Is(err, errors.NotValid).
func NewTransport(d *Dialer, base *http.Transport) (*Transport, error) {
	switch {
	case d == nil:
		return nil, jujuerrors.NotValidf("nil Dialer")
	case d.holdoff == nil:
		return nil, jujuerrors.NotValidf("Dialer not made by New")
	}
	if base == nil {
		base, _ = http.DefaultTransport.(*http.Transport)
		if base == nil {
			base = &http.Transport{}
		}
	}
	t := &Transport{d: d, conns: make(map[*beforeConn]struct{})}
	t.after = cloneFor(base, t.dial)
	// Under RequireLocal, or with LocalPort 0, there is nothing to move.
	if ready := d.LocalReady(); d.Policy() != RequireLocal && ready != nil && !isClosed(ready) {
		t.ready = ready
		t.before = cloneFor(base, t.dialBefore)
	} else {
		t.moved.Store(true)
	}
	return t, nil
}

func cloneFor(base *http.Transport, dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	c := base.Clone()
	c.Proxy, c.OnProxyConnectResponse = nil, nil
	// Every other way out is cleared: DialContext is the only one.
	//lint:ignore SA1019 a caller's base may still set the deprecated Dial and DialTLS, and its clone would dial past the Dialer
	c.Dial, c.DialTLS, c.DialTLSContext = nil, nil, nil
	c.DialContext = dial
	return c
}

// RoundTrip sends req on the connection pool of the moment: before the
// move or after it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.moved.Load() {
		return t.after.RoundTrip(req)
	}
	if isClosed(t.ready) {
		t.move() // before the watcher did, or with no watcher (no connection yet)
		return t.after.RoundTrip(req)
	}
	t.inflight.Add(1)
	if t.moved.Load() {
		t.finish()
		return t.after.RoundTrip(req)
	}
	resp, err := t.before.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		t.finish()
		return resp, err
	}
	b := &beforeBody{ReadCloser: resp.Body, done: sync.OnceFunc(t.finish)}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
		// An upgraded connection (101 Switching Protocols): its body is
		// the connection, and it is done when the caller closes it.
		resp.Body = &beforeUpgrade{beforeBody: b, w: rw}
	} else {
		resp.Body = b
	}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of both pools.
// http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	if t.before != nil {
		t.before.CloseIdleConnections()
	}
	t.after.CloseIdleConnections()
}

// move switches new requests to after and closes before's connections
// that no request uses: the idle ones now, the others as their last
// request ends (finish).
func (t *Transport) move() {
	if !t.moved.CompareAndSwap(false, true) {
		return
	}
	t.before.CloseIdleConnections()
	if t.inflight.Load() == 0 {
		t.closeBefore()
	}
}

// finish ends one request on before; the last to end after the move closes
// every connection before still has, none of which a request can use now.
func (t *Transport) finish() {
	if t.inflight.Add(-1) == 0 && t.moved.Load() {
		t.closeBefore()
	}
}

func (t *Transport) closeBefore() {
	t.mu.Lock()
	conns := slices.Collect(maps.Keys(t.conns))
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// dial dials for after; dialBefore wraps it for before.
func (t *Transport) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, _, err := t.d.Dial(ctx)
	return c, err
}

// dialBefore dials for before and tracks the connection, so that the move
// can close it once no request uses it.
func (t *Transport) dialBefore(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	bc := &beforeConn{Conn: c, t: t}
	t.mu.Lock()
	t.conns[bc] = struct{}{}
	if t.empty == nil && !t.moved.Load() {
		t.empty = make(chan struct{})
		go t.watch(t.empty)
	}
	t.mu.Unlock()
	if t.moved.Load() && t.inflight.Load() == 0 {
		// Dialled for a request that gave up, after the last one ended:
		// nobody would close it.
		_ = bc.Close()
		return nil, net.ErrClosed
	}
	return bc, nil
}

// watch moves home when LocalReady closes, unless before's last
// connection closes first.
func (t *Transport) watch(empty <-chan struct{}) {
	select {
	case <-t.ready:
		t.move()
	case <-empty:
	}
}

// beforeConn is a connection of the before pool.
type beforeConn struct {
	net.Conn
	t    *Transport
	once sync.Once
}

func (c *beforeConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		t := c.t
		t.mu.Lock()
		delete(t.conns, c)
		if len(t.conns) == 0 && t.empty != nil {
			close(t.empty)
			t.empty = nil
		}
		t.mu.Unlock()
	})
	return err
}

// beforeBody ends its request (finish) at the first error from Read (io.EOF
// included: by then http.Transport has put the connection back in its
// pool) or at Close, whichever comes first.
type beforeBody struct {
	io.ReadCloser
	done func() // t.finish, once
}

func (b *beforeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *beforeBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}

// beforeUpgrade is the body of an upgraded connection: it keeps Write, and
// ends its request only at Close.
type beforeUpgrade struct {
	*beforeBody
	w io.Writer
}

func (b *beforeUpgrade) Read(p []byte) (int, error) { return b.ReadCloser.Read(p) }

func (b *beforeUpgrade) Write(p []byte) (int, error) { return b.w.Write(p) }
