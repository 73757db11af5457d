// Package faultnet is the one TCP fault proxy of etcdlease's test kits:
// etcdtest's client Links (a proxy in front of a member's client port) and
// etcdfault's member links (a proxy in front of each member's peer and
// client ports, cut per direction between members).
//
// A Proxy listens on loopback and forwards each connection to its target.
// Each direction of a connection crosses one Path, whose Fault a test sets
// (why holding bytes is a dropped packet: DESIGN.md).
package faultnet

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what a Path does to the bytes crossing it.
type Fault int

const (
	// None lets every byte through at once.
	None Fault = iota
	// Slow delivers each chunk the Path's delay after it was read.
	Slow
	// Pause holds every chunk, and delivers them in order at the heal, as
	// TCP's retransmissions would.
	Pause
	// Cut holds every chunk, and at the heal closes every connection that
	// crossed the Path meanwhile: what it held is lost.
	Cut
	// Refuse closes every connection crossing the Path, and each new one
	// at once.
	Refuse
)

func (f Fault) String() string {
	switch f {
	case None:
		return "none"
	case Slow:
		return "slow"
	case Pause:
		return "pause"
	case Cut:
		return "cut"
	case Refuse:
		return "refuse"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Path is a way bytes take between two ends: one direction of a link, or
// both (a Proxy's Route may give a connection the same Path each way). Its
// zero value lets everything through. It is safe for concurrent use.
type Path struct {
	mu      sync.Mutex
	fault   Fault
	delay   time.Duration      // while fault is Slow
	changed chan struct{}      // closed at the next Set; nil until asked for
	conns   map[*conn]struct{} // the connections crossing it
}

// Set replaces the Path's fault; delay is Slow's (Slow with delay ≤ 0 is
// None). Leaving Cut closes the connections that crossed the Path during
// it; Refuse closes every connection crossing it. They are closed before
// the change is published: a writer woken by it must not deliver what a
// cut held.
func (p *Path) Set(f Fault, delay time.Duration) {
	if f == Slow && delay <= 0 {
		f = None
	}
	if f != Slow {
		delay = 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f == Refuse || p.fault == Cut && f != Cut {
		for c := range p.conns {
			c.close()
		}
	}
	p.fault, p.delay = f, delay
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// Fault returns the Path's fault now.
func (p *Path) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// track adds c to the connections a fault reaches; false (and c not added)
// if the Path refuses connections.
func (p *Path) track(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault == Refuse {
		return false
	}
	if p.conns == nil {
		p.conns = make(map[*conn]struct{})
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Path) untrack(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// await waits until a chunk read at `at` may cross; false if c is closed
// first.
func (p *Path) await(c *conn, at time.Time) bool {
	for {
		// The fault now, and a channel closed at its next change.
		p.mu.Lock()
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		f, delay, changed := p.fault, p.delay, p.changed
		p.mu.Unlock()
		var due <-chan time.Time
		switch f {
		case None:
			return true
		case Slow:
			wait := time.Until(at.Add(delay))
			if wait <= 0 {
				return true
			}
			due = time.After(wait)
		}
		// Held: paused, cut, or refused until Set closes c.
		select {
		case <-due:
			return true
		case <-changed:
		case <-c.gone:
			return false
		}
	}
}

// Config describes a Proxy.
type Config struct {
	// Route names the Paths an accepted connection's bytes cross: up,
	// from the dialler to the target, and down, back. It is called first,
	// while the dialler's socket surely exists; ok false closes the
	// connection. nil means one Path of the Proxy's own (Proxy.Path),
	// both ways.
	Route func(in net.Conn) (up, down *Path, ok bool)
	// Wait makes a new connection wait, while the target is down (empty)
	// or refuses, for the next SetTarget, as a client retrying a
	// restarting server would; otherwise the connection is closed (its
	// client redials).
	Wait bool
}

// Proxy forwards the TCP connections made to its loopback port to its
// target. It is safe for concurrent use.
type Proxy struct {
	cfg  Config
	path Path // the Path of a Proxy without a Route
	l    net.Listener
	wg   sync.WaitGroup // accept and serve
	done chan struct{}  // closed by Close
	// held counts the chunks read from one end and not yet written to the
	// other: what faults hold.
	held atomic.Int64

	mu      sync.Mutex // guards the fields below
	target  string
	changed chan struct{} // closed when target changes
	conns   map[*conn]struct{}
	closed  bool
}

// Listen starts a proxy on a free loopback port, forwarding to target
// (host:port; empty: down until SetTarget).
func Listen(target string, cfg Config) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg: cfg, l: l, done: make(chan struct{}), target: target,
		changed: make(chan struct{}), conns: make(map[*conn]struct{}),
	}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Path is the Path both directions of every connection cross when the
// Config has no Route.
func (p *Proxy) Path() *Path { return &p.path }

// Held returns how many chunks of bytes the proxy has read and not yet
// delivered: what faults hold.
func (p *Proxy) Held() int64 { return p.held.Load() }

// SetTarget points the proxy at addr (empty: the target is down). Open
// connections keep their target.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.l.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.serve(in) })
	}
}

// serve forwards one connection.
func (p *Proxy) serve(in net.Conn) {
	up, down, ok := &p.path, &p.path, true
	if p.cfg.Route != nil {
		up, down, ok = p.cfg.Route(in)
	}
	if !ok || up.Fault() == Refuse || down.Fault() == Refuse {
		in.Close()
		return
	}
	out := p.dial()
	if out == nil {
		in.Close()
		return
	}
	c := &conn{in: in, out: out, gone: make(chan struct{})}
	if !p.track(c, up, down) {
		c.close()
		return
	}
	defer p.untrack(c, up, down)
	var wg sync.WaitGroup
	upc, downc := make(chan chunk, pipeChunks), make(chan chunk, pipeChunks)
	wg.Go(func() { p.read(c, in, upc) })
	wg.Go(func() { p.write(c, out, up, upc) })
	wg.Go(func() { p.read(c, out, downc) })
	wg.Go(func() { p.write(c, in, down, downc) })
	wg.Wait()
}

// dial connects to the target; nil if it is down (after waiting for it,
// with Config.Wait, until the proxy closes).
func (p *Proxy) dial() net.Conn {
	for {
		p.mu.Lock()
		target, changed := p.target, p.changed
		p.mu.Unlock()
		if target != "" {
			if out, err := net.DialTimeout("tcp", target, 5*time.Second); err == nil {
				return out
			}
		}
		if !p.cfg.Wait {
			return nil
		}
		// Down, or dead but not yet marked down: wait for its next address.
		select {
		case <-changed:
		case <-p.done:
			return nil
		}
	}
}

// track adds c to the connections Close and the Paths' faults reach; false
// if the proxy is closed or a Path refuses connections since c was
// accepted.
func (p *Proxy) track(c *conn, up, down *Path) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if !up.track(c) {
		return false
	}
	if !down.track(c) {
		up.untrack(c)
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *conn, up, down *Path) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	up.untrack(c)
	down.untrack(c)
	c.close()
}

// conn is one connection across the proxy: in from the dialler, out to the
// target.
type conn struct {
	in, out net.Conn
	once    sync.Once
	gone    chan struct{} // closed by close
}

// close closes both ends, so that the four goroutines moving its bytes
// end. It does not block.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.gone)
		c.in.Close()
		c.out.Close()
	})
}

// chunk is what one read returned, and when.
type chunk struct {
	b  []byte
	at time.Time
}

// pipeChunks bounds the chunks held per direction of a connection: past
// it, the proxy stops reading and the sender's writes block, as TCP's
// window would make them.
const pipeChunks = 64

// read moves what src sends into ch, stamped with the time read, until src
// ends; then it closes ch, so that write delivers what is left and ends.
func (p *Proxy) read(c *conn, src net.Conn, ch chan<- chunk) {
	defer close(ch)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.held.Add(1)
			select {
			case ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}:
			case <-c.gone:
				p.held.Add(-1)
				return
			}
		}
		if err != nil {
			return // EOF included: etcd's peers and clients never half-close
		}
	}
}

// write delivers each chunk of ch to dst when path lets it through. When
// ch ends or dst fails it closes c, so that the other direction ends too,
// and lets go of what is left.
func (p *Proxy) write(c *conn, dst net.Conn, path *Path, ch <-chan chunk) {
	for k := range ch {
		ok := path.await(c, k.at)
		if ok {
			_, err := dst.Write(k.b)
			ok = err == nil
		}
		p.held.Add(-1)
		if !ok {
			break
		}
	}
	c.close()
	for range ch { // read ends once c is closed
		p.held.Add(-1)
	}
}
