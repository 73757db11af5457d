package etcdtest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Link is the network between clients and one member's client port: a TCP
// proxy on loopback that a test can cut, refuse, slow or pause, and heal —
// the faults a lease holder meets when it loses sight of etcd while etcd
// itself carries on (a partition, a congested or frozen path). Only the
// clients that dial Link's endpoint (Client, or a client of Endpoints) go
// through it; Member.Client does not. Each fault method replaces the one
// before; Heal ends it. A Link is safe for concurrent use, and lives as
// long as its member: Member.Close closes it and its client.
type Link struct {
	target string // the member's client address, host:port
	l      net.Listener
	wg     sync.WaitGroup // the goroutines of accept and serve
	// held counts the chunks read from one end and not yet written to the
	// other (for the kit's tests: bytes a fault holds).
	held atomic.Int64

	mu      sync.Mutex // guards the fields below
	fault   fault
	delay   time.Duration // while fault is faultSlow
	changed chan struct{} // closed when the fault changes
	conns   map[*pair]struct{}
	client  *clientv3.Client
	closed  bool
}

// fault is what a link does to the bytes crossing it.
type fault int

const (
	faultNone    fault = iota
	faultSlow          // each chunk delivered delay after it was read
	faultPaused        // held, delivered at the heal
	faultCut           // held, and the connection closed at the heal
	faultRefused       // every connection closed at once
)

// newLink starts a link to the member name's client address target.
func newLink(name, target string) (*Link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client link of member %s: %w", name, err)
	}
	k := &Link{
		target: target, l: l,
		changed: make(chan struct{}), conns: make(map[*pair]struct{}),
	}
	k.wg.Add(1)
	go k.accept()
	return k, nil
}

// Endpoints returns the link's address (http://127.0.0.1:port), for
// clientv3.Config.Endpoints: a client of it reaches the member through the
// link. It stays the same across the member's restarts.
func (k *Link) Endpoints() []string { return []string{"http://" + k.l.Addr().String()} }

// Client returns a client of the member through the link (made at the
// first call), closed with the member. Like Member.Client it logs nothing,
// notices a dead connection within about 2 s, and redials within 200 ms
// once the link heals (gRPC's default backoff grows to two minutes).
func (k *Link) Client() *clientv3.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.client == nil {
		k.client = mustClient(k.Endpoints()...)
		if k.closed {
			k.client.Close()
		}
	}
	return k.client
}

// Cut blackholes the link, as a partition does: nothing crosses it either
// way and nobody is told — calls run into their own timeouts, connections
// open (the proxy accepts them) but carry nothing. The bytes sent meanwhile
// are lost: at the heal, every connection open during the cut is closed,
// and clients redial.
func (k *Link) Cut() { k.set(faultCut, 0) }

// Refuse closes every connection across the link, and each new one at once,
// as a host that rejects them would: connections fail fast instead of
// hanging. (A call of etcd's client waits for a connection by default, so
// it still ends at its deadline, though its client knows why.)
func (k *Link) Refuse() { k.set(faultRefused, 0) }

// Slow delays every byte crossing the link by d, each way, as a congested
// path would: a request and its answer arrive at least 2×d later than they
// would have (d of latency, not a limit on throughput). Slow(0) is Heal.
func (k *Link) Slow(d time.Duration) {
	if d <= 0 {
		k.Heal()
		return
	}
	k.set(faultSlow, d)
}

// Pause holds every byte crossing the link, either way, on connections
// that stay open, as a frozen path or a stalled peer would; at the heal
// they all arrive, in order, as TCP's retransmissions would deliver them.
// A client's keepalive may give up on a connection first (this package's
// clients do after about 2 s) and close it.
func (k *Link) Pause() { k.set(faultPaused, 0) }

// Heal ends the link's fault: held bytes cross (after Cut, the connections
// it doomed are closed instead), new ones cross at once.
func (k *Link) Heal() { k.set(faultNone, 0) }

// set replaces the link's fault. Leaving a cut closes the connections that
// lived through it (their streams lost bytes); a refusal closes them all.
// They are closed before the change is published: a writer woken by it
// must not deliver what the cut held.
func (k *Link) set(f fault, delay time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f == faultRefused || k.fault == faultCut && f != faultCut {
		for p := range k.conns {
			p.close()
		}
	}
	k.fault, k.delay = f, delay
	close(k.changed)
	k.changed = make(chan struct{})
}

// state returns the fault now, and a channel closed at its next change.
func (k *Link) state() (fault, time.Duration, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fault, k.delay, k.changed
}

// close stops accepting, closes the client and every connection, and waits
// for the link's goroutines. It is idempotent.
func (k *Link) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	cli := k.client
	var ps []*pair
	for p := range k.conns {
		ps = append(ps, p)
	}
	k.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
	k.l.Close()
	for _, p := range ps {
		p.close()
	}
	k.wg.Wait()
}

func (k *Link) accept() {
	defer k.wg.Done()
	for {
		in, err := k.l.Accept()
		if err != nil {
			return // closed
		}
		k.wg.Add(1)
		go k.serve(in)
	}
}

// serve forwards one connection, unless the link refuses it or the member
// is down (the client sees the connection close, and redials).
func (k *Link) serve(in net.Conn) {
	defer k.wg.Done()
	if f, _, _ := k.state(); f == faultRefused {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", k.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	p := &pair{in: in, out: out, gone: make(chan struct{})}
	if !k.track(p) {
		p.close()
		return
	}
	defer k.untrack(p)
	var wg sync.WaitGroup
	wg.Add(4)
	up, down := make(chan chunk, pipeChunks), make(chan chunk, pipeChunks)
	go func() { defer wg.Done(); k.read(p, in, up) }()
	go func() { defer wg.Done(); k.write(p, out, up) }()
	go func() { defer wg.Done(); k.read(p, out, down) }()
	go func() { defer wg.Done(); k.write(p, in, down) }()
	wg.Wait()
}

// track adds p to the connections a fault or close reaches; false (and p
// not added) if the link is closed, or refuses connections since p was
// accepted.
func (k *Link) track(p *pair) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.fault == faultRefused {
		return false
	}
	k.conns[p] = struct{}{}
	return true
}

func (k *Link) untrack(p *pair) {
	k.mu.Lock()
	delete(k.conns, p)
	k.mu.Unlock()
	p.close()
}

// pair is one connection across the link: in from the client, out to the
// member.
type pair struct {
	in, out net.Conn
	once    sync.Once
	gone    chan struct{} // closed by close
}

// close closes both ends, so that the four goroutines moving its bytes end.
// It does not block.
func (p *pair) close() {
	p.once.Do(func() {
		close(p.gone)
		p.in.Close()
		p.out.Close()
	})
}

// chunk is what one read returned, and when.
type chunk struct {
	b  []byte
	at time.Time
}

// pipeChunks bounds the chunks held per direction of a connection: past
// it, the link stops reading and the sender's writes block, as TCP's
// window would make them.
const pipeChunks = 64

// read moves what src sends into ch, stamped with the time read, until src
// ends; then it closes ch, so that write delivers what is left and ends.
func (k *Link) read(p *pair, src net.Conn, ch chan<- chunk) {
	defer close(ch)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			k.held.Add(1)
			select {
			case ch <- chunk{b: buf[:n], at: time.Now()}:
			case <-p.gone:
				k.held.Add(-1)
				return
			}
		}
		if err != nil {
			return // EOF included: etcd's clients never half-close
		}
	}
}

// write delivers each chunk of ch to dst when the link's fault lets it
// through. When ch ends or dst fails it closes the pair, so that the other
// direction ends too, and lets go of what is left.
func (k *Link) write(p *pair, dst net.Conn, ch <-chan chunk) {
	for c := range ch {
		ok := k.await(p, c.at)
		if ok {
			_, err := dst.Write(c.b)
			ok = err == nil
		}
		k.held.Add(-1)
		if !ok {
			break
		}
	}
	p.close()
	for range ch { // read ends once p is closed
		k.held.Add(-1)
	}
}

// await waits until a chunk read at `at` may be delivered; false if the
// pair is closed first.
func (k *Link) await(p *pair, at time.Time) bool {
	for {
		f, delay, changed := k.state()
		var due <-chan time.Time
		switch f {
		case faultNone:
			return true
		case faultSlow:
			wait := time.Until(at.Add(delay))
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			due = t.C
			defer t.Stop() // at most one per change of fault
		}
		// Held (paused, cut, or refused until set closes p).
		select {
		case <-due:
			return true
		case <-changed:
		case <-p.gone:
			return false
		}
	}
}
