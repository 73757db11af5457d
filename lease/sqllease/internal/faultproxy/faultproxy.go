// Package faultproxy is the TCP fault proxy of sqllease's tests: a
// loopback port that forwards each connection to a target (the Postgres
// server), and can black-hole its bytes (held, as a lost route or a
// partition would, delivered at the heal) or cut every connection (closed
// at once, and new ones refused while cut).
package faultproxy

import (
	"net"
	"sync"
)

// Fault is what the proxy does to the bytes it forwards.
type Fault int

const (
	// None forwards every byte at once.
	None Fault = iota
	// BlackHole holds every byte, of open and new connections, until the
	// next Set: nothing is answered and nothing fails.
	BlackHole
	// Cut closes every connection, and each new one at once.
	Cut
)

// Proxy forwards the connections made to Addr to its target. It is safe
// for concurrent use.
type Proxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	fault   Fault
	changed chan struct{} // closed at the next Set
	conns   map[net.Conn]struct{}
	closed  bool
}

// Listen starts a proxy on a free loopback port in front of target.
func Listen(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, changed: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Set sets the fault; Cut closes every open connection.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	if f == Cut {
		for c := range p.conns {
			c.Close()
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close closes the proxy and every connection, and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.l.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.fault == Cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	if !p.track(in) {
		in.Close()
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(out) {
		if out != nil {
			out.Close()
		}
		p.untrack(in)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in) }()
	go func() { defer wg.Done(); p.pipe(in, out) }()
	wg.Wait()
	p.untrack(in, out)
}

// pipe copies src to dst, holding each chunk while the fault is
// BlackHole; it closes both when either ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the proxy black-holes; false if it is cut or closed.
func (p *Proxy) pass() bool {
	for {
		p.mu.Lock()
		f, changed, closed := p.fault, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || f == Cut:
			return false
		case f == None:
			return true
		}
		<-changed
	}
}
