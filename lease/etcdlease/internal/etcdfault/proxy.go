//go:build linux

package etcdfault

import (
	"net"
	"sync"
)

// proxy forwards the TCP connections made to its loopback port to one
// member's port (its peer port or its client port). Its address is the one
// the cluster advertises, so it stays the same when the member restarts on
// new ports.
//
// A peer proxy also knows which member dialled each connection (see
// dialler), so that a cut of the link from member i to member j stalls
// exactly the bytes i sends j: on a connection i dialled to j's proxy, the
// bytes upstream; on one j dialled to i's proxy, the bytes downstream.
// Stalling (holding the bytes, reading no more) is what a dropped packet
// does to TCP: the sender's writes block once the buffers are full, the
// connection stays open, and etcd notices only by its own timeouts. A heal
// lets the held bytes through, as TCP retransmission would.
type proxy struct {
	l     net.Listener
	index int    // the member it forwards to
	links *links // the links between members; nil for a client proxy
	// clientsIn, for a client proxy, is the link from every client to the
	// member: cut, what clients send waits.
	clientsIn *link
	// dialler names the member that dialled a connection, -1 if unknown.
	dialler func(c net.Conn) int

	done chan struct{} // closed by close
	wg   sync.WaitGroup

	mu      sync.Mutex
	target  string        // the member's own address; "" while it is down
	changed chan struct{} // closed when target changes
	conns   map[net.Conn]struct{}
}

func newProxy(index int, ls *links, dialler func(net.Conn) int) (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{
		l: l, index: index, links: ls, dialler: dialler, clientsIn: &link{},
		done: make(chan struct{}), changed: make(chan struct{}), conns: make(map[net.Conn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// url is the address the cluster advertises for the member.
func (p *proxy) url() string { return "http://" + p.l.Addr().String() }

// setTarget points the proxy at the member's address (empty: the member is
// down, and new connections wait until it is back, as a client retrying a
// restarting member would).
func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proxy) current() (string, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target, p.changed
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			in.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

// track adds c to the connections close closes; false once closed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

// serve forwards one connection. The dialler is found first, while its
// socket surely exists.
func (p *proxy) serve(in net.Conn) {
	defer p.wg.Done()
	from := -1
	if p.links != nil {
		if from = p.dialler(in); from < 0 {
			// Not one of our members (or it died as it dialled): it
			// would cross a link we cannot name. etcd redials.
			p.untrack(in)
			return
		}
	}
	out := p.dial()
	if out == nil || !p.track(out) {
		if out != nil {
			out.Close()
		}
		p.untrack(in)
		return
	}
	up, down := p.clientsIn, (*link)(nil) // nil: never cut
	if p.links != nil {
		up, down = p.links.get(from, p.index), p.links.get(p.index, from)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in, up) }()
	go func() { defer wg.Done(); p.pipe(in, out, down) }()
	wg.Wait()
	p.untrack(in, out)
}

// dial connects to the member, waiting while it is down; nil once the
// proxy is closed.
func (p *proxy) dial() net.Conn {
	for {
		target, changed := p.current()
		if target != "" {
			if out, err := net.Dial("tcp", target); err == nil {
				return out
			}
		}
		// Down, or dead but not yet marked down: wait for its next address.
		select {
		case <-changed:
		case <-p.done:
			return nil
		}
	}
}

// pipe copies src to dst, holding each chunk while l is cut. It closes
// both ends when src ends or either fails, so that its twin ends too.
func (p *proxy) pipe(dst, src net.Conn, l *link) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if l != nil && !l.awaitOpen(p.done) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF included: etcd's peers and clients never half-close
		}
	}
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.l.Close()
	p.wg.Wait()
}

// links is the state of every directed link between members.
type links struct {
	mu sync.Mutex
	m  map[[2]int]*link
}

func newLinks() *links { return &links{m: make(map[[2]int]*link)} }

func (ls *links) get(from, to int) *link {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	k := [2]int{from, to}
	l := ls.m[k]
	if l == nil {
		l = &link{}
		ls.m[k] = l
	}
	return l
}

// link is one direction between two members: open, or cut until healed.
type link struct {
	mu     sync.Mutex
	healed chan struct{} // non-nil while cut; closed by heal
}

func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.healed == nil {
		l.healed = make(chan struct{})
	}
}

func (l *link) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.healed != nil {
		close(l.healed)
		l.healed = nil
	}
}

func (l *link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healed != nil
}

// awaitOpen returns true once the link is open, false if done closes first.
func (l *link) awaitOpen(done <-chan struct{}) bool {
	for {
		l.mu.Lock()
		healed := l.healed
		l.mu.Unlock()
		if healed == nil {
			return true
		}
		select {
		case <-healed:
		case <-done:
			return false
		}
	}
}
