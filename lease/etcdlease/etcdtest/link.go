package etcdtest

import (
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/faultnet"
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
	p *faultnet.Proxy

	mu     sync.Mutex // guards the fields below
	client *clientv3.Client
	closed bool
}

// newLink starts a link to the member name's client address target.
func newLink(name, target string) (*Link, error) {
	p, err := faultnet.Listen(target, faultnet.Config{})
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client link of member %s: %w", name, err)
	}
	return &Link{p: p}, nil
}

// Endpoints returns the link's address (http://127.0.0.1:port), for
// clientv3.Config.Endpoints: a client of it reaches the member through the
// link. It stays the same across the member's restarts.
func (k *Link) Endpoints() []string { return []string{"http://" + k.p.Addr()} }

// Client returns a client of the member through the link (made at the
// first call), closed with the member. Like Member.Client it logs nothing,
// notices a dead connection within about 2 s, and redials within 200 ms
// once the link heals.
func (k *Link) Client() *clientv3.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	return lazyClient(&k.client, k.closed, k.Endpoints()...)
}

// Cut blackholes the link, as a partition does: nothing crosses it either
// way and nobody is told — calls run into their own timeouts, connections
// open (the proxy accepts them) but carry nothing. The bytes sent meanwhile
// are lost: at the heal, every connection open during the cut is closed,
// and clients redial.
func (k *Link) Cut() { k.p.Path().Set(faultnet.Cut, 0) }

// Refuse closes every connection across the link, and each new one at once,
// as a host that rejects them would: connections fail fast instead of
// hanging. (A call of etcd's client waits for a connection by default, so
// it still ends at its deadline, though its client knows why.)
func (k *Link) Refuse() { k.p.Path().Set(faultnet.Refuse, 0) }

// Slow delays every byte crossing the link by d, each way, as a congested
// path would: a request and its answer arrive at least 2×d later than they
// would have (d of latency, not a limit on throughput). Slow(0) is Heal.
func (k *Link) Slow(d time.Duration) { k.p.Path().Set(faultnet.Slow, d) }

// Pause holds every byte crossing the link, either way, on connections
// that stay open, as a frozen path or a stalled peer would; at the heal
// they all arrive, in order, as TCP's retransmissions would deliver them.
// A client's keepalive may give up on a connection first (this package's
// clients do after about 2 s) and close it.
func (k *Link) Pause() { k.p.Path().Set(faultnet.Pause, 0) }

// Heal ends the link's fault: held bytes cross (after Cut, the connections
// it doomed are closed instead), new ones cross at once.
func (k *Link) Heal() { k.p.Path().Set(faultnet.None, 0) }

// close closes the client, stops accepting, closes every connection, and
// waits for the link's goroutines. It is idempotent.
func (k *Link) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	cli := k.client
	k.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
	k.p.Close()
}
