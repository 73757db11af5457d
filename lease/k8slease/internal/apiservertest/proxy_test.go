package apiservertest

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy is a TCP proxy in front of the API server, for one client: it
// forwards, stalls (holds every byte in both directions until it forwards
// again: a slow API server) or cuts (closes every connection and every new
// one at once: an API server down).
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    proxyMode
	resume  chan struct{} // closed when a stall ends
	holding chan struct{} // closed when this stall first holds the client's bytes
	conns   map[net.Conn]struct{}
	closed  bool
	running sync.WaitGroup
	// connected is closed, and replaced, at each connection forwarded.
	connected chan struct{}
}

type proxyMode int

const (
	forwarding proxyMode = iota
	stalled
	cut
)

// newProxy starts a proxy to the test server, stopped at cleanup.
func newProxy(t *testing.T) *proxy {
	t.Helper()
	u, err := url.Parse(apiServer.Host)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: u.Host, resume: make(chan struct{}), holding: make(chan struct{}), connected: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	close(p.resume)
	p.running.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// held returns a channel closed once the current stall holds bytes the
// client sent: a call the client began is stuck in the proxy.
func (p *proxy) held() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

// set switches the proxy to mode m.
func (p *proxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case m == stalled && p.mode != stalled:
		p.resume = make(chan struct{})
		p.holding = make(chan struct{})
	case m != stalled && p.mode == stalled:
		close(p.resume)
	}
	p.mode = m
	if m == cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// drop closes every connection open now and goes on forwarding: what a
// client sees when the API server (or a load balancer) ends its
// connections and serves the next.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// nextConn returns a channel closed when the proxy next forwards a new
// connection.
func (p *proxy) nextConn() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connected
}

func (p *proxy) serve() {
	defer p.running.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.mode == cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		p.mu.Lock()
		close(p.connected)
		p.connected = make(chan struct{})
		p.mu.Unlock()
		p.running.Add(2)
		go p.pipe(up, c, true)
		go p.pipe(c, up, false)
	}
}

// track registers a pair of connections, or closes them if the proxy cut
// or closed meanwhile.
func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == cut {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst, holding each chunk while the proxy stalls;
// fromClient says src is the client's connection.
func (p *proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.running.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.resume
			if fromClient && p.mode == stalled {
				select {
				case <-p.holding:
				default:
					close(p.holding)
				}
			}
			p.mu.Unlock()
			<-resume // a cut or a close ends a stall too
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.set(cut)
	p.ln.Close()
	p.running.Wait()
}
