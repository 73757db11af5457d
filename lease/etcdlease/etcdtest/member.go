package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

const (
	memberTickMs      = 50
	memberElectionMs  = 500
	clusterTickMs     = 100
	clusterElectionMs = 1000
	// readyWithin bounds the wait for a member to serve.
	readyWithin = 20 * time.Second
	// startAttempts bounds the retries of a cluster's start whose reserved
	// peer ports were taken meanwhile (see reservePorts).
	startAttempts = 3
)

// Member is one etcd server running in this process. Its client address
// (and a cluster member's peer address) stay the same across Stop and
// Restart, and so does its data (DESIGN.md, "Ports"). A Member is safe for
// concurrent use.
type Member struct {
	name   string
	dir    string
	ownDir bool // dir was made by NewMember: Close removes it
	peer   url.URL
	// initial is the initial cluster ("name=peerURL,...") it was started in.
	initial          string
	tick, electionMs uint

	// life serializes starts and stops, so that a Stop (or Close) returns
	// only once the member is down, even while another Stop is under way.
	life sync.Mutex

	mu        sync.Mutex  // guards the fields below
	etcd      *embed.Etcd // nil while stopped
	clientURL url.URL     // picked at the first start, reused by Restart
	client    *clientv3.Client
	link      *Link // made at the first start
	closed    bool
}

// Start starts a single-member etcd for the test t and returns it once it
// serves. At t.Cleanup its client is closed, the member stopped and its
// data removed. Start fails the test if the member cannot start.
func Start(t testing.TB) *Member {
	t.Helper()
	m, err := NewMember()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

// NewMember starts a single-member etcd, with its data in a new temporary
// directory, and returns it once it serves. Close it when done: Start does
// that for a test; NewMember is for an Example or a TestMain that shares
// one member between tests.
func NewMember() (*Member, error) {
	dir, err := os.MkdirTemp("", "etcdtest")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: data directory: %w", err)
	}
	// Port 0 for the peer URL too: nobody dials a single member's peer
	// port, and a restart binds it afresh.
	m := newMember("single", dir, 0, memberTickMs, memberElectionMs)
	m.ownDir = true
	m.initial = m.name + "=" + m.peer.String()
	if err := m.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

func newMember(name, dir string, peerPort int, tick, election uint) *Member {
	return &Member{
		name: name, dir: dir, tick: tick, electionMs: election,
		peer:      url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)},
		clientURL: url.URL{Scheme: "http", Host: "127.0.0.1:0"},
	}
}

// Name is the member's name in its cluster ("single" for a single member).
func (m *Member) Name() string { return m.name }

// Endpoints returns the member's client URL (http://127.0.0.1:port), for
// clientv3.Config.Endpoints. It stays the same across Restart.
func (m *Member) Endpoints() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []string{m.clientURL.String()}
}

// Client returns a client of this member (made at the first call), which
// lives across Stop and Restart — it reconnects — and is closed by Close
// (after Close, a closed client). It logs nothing, notices a dead
// connection within about 2 s and redials within 200 ms.
func (m *Member) Client() *clientv3.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lazyClient(&m.client, m.closed, m.clientURL.String())
}

// Link returns the member's client link (see Link), the same across Stop
// and Restart.
func (m *Member) Link() *Link {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.link
}

// Etcd returns the running server (nil while stopped), for what this
// package does not wrap: Etcd().Server.HardStop() stops raft at once while
// the member's listeners stay open, Etcd().Server.Leader() says which
// member it follows.
func (m *Member) Etcd() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Stop stops the member as a crash would: raft stops without handing
// leadership over, then its listeners close (its gRPC server ends the open
// streams gracefully, which can take seconds). Its data stays for Restart.
// Stop is idempotent.
func (m *Member) Stop() {
	m.life.Lock()
	defer m.life.Unlock()
	m.stopLocked()
}

// stopLocked stops the member; called with m.life held (or before anyone
// else can see the member).
func (m *Member) stopLocked() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Server.HardStop()
		e.Close()
	}
}

// Restart starts the member again on its data and addresses, stopping it
// first if it runs, and returns once it serves (a cluster member serves
// once it has rejoined a quorum). It fails if another process took one of
// its ports meanwhile, or after Close.
func (m *Member) Restart() error {
	m.Stop()
	return m.start()
}

// Close stops the member for good: its clients are closed, its link
// closed, the member stopped, and the data directory made by NewMember
// removed. It is idempotent.
func (m *Member) Close() {
	m.mu.Lock()
	m.closed = true
	cli := m.client
	m.client = nil
	link := m.link
	m.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
	if link != nil {
		link.close()
	}
	m.Stop()
	if m.ownDir {
		os.RemoveAll(m.dir)
	}
}

// start starts the member and waits until it serves.
func (m *Member) start() error {
	m.life.Lock()
	defer m.life.Unlock()
	e, err := m.launch()
	if err != nil {
		return err
	}
	if err := awaitReady(m.name, e, time.Now().Add(readyWithin)); err != nil {
		m.stopLocked()
		return err
	}
	return nil
}

// launch starts the member's server without waiting for it to serve;
// called with m.life held (or before anyone else can see the member).
func (m *Member) launch() (*embed.Etcd, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("etcdtest: member closed")
	}
	if m.etcd != nil {
		return nil, errors.New("etcdtest: member already running")
	}
	// The first start picks the client port (see stablePort), tried again
	// with another if someone took it meanwhile; a restart keeps it, so
	// that clients find the member again.
	first := m.clientURL.Port() == "0"
	var e *embed.Etcd
	var err error
	for attempt := 0; ; attempt++ {
		if first {
			m.clientURL.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(stablePort()))
		}
		if e, err = embed.StartEtcd(m.config()); err == nil || !first || attempt == startAttempts-1 {
			break
		}
	}
	if err != nil {
		if first {
			m.clientURL.Host = "127.0.0.1:0"
		}
		return nil, fmt.Errorf("etcdtest: member %s: %w", m.name, err)
	}
	// Port 0 (no stable port found): keep the port the kernel chose.
	m.clientURL = url.URL{Scheme: "http", Host: e.Clients[0].Addr().String()}
	if m.link == nil {
		if m.link, err = newLink(m.name, m.clientURL.Host); err != nil {
			e.Server.HardStop()
			e.Close()
			return nil, err
		}
	}
	m.etcd = e
	return e, nil
}

// awaitReady waits until the member name, launched as e, serves.
func awaitReady(name string, e *embed.Etcd, deadline time.Time) error {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcdtest: member %s failed to start: %w", name, err)
	case <-timeout.C:
		return fmt.Errorf("etcdtest: member %s not ready after %v", name, readyWithin)
	}
}

func (m *Member) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.TickMs = m.tick
	cfg.ElectionMs = m.electionMs
	cfg.UnsafeNoFsync = true // test data, thrown away
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peer}
	cfg.AdvertisePeerUrls = []url.URL{m.peer}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "etcdtest"
	return cfg
}

// lazyClient returns *cli, made of endpoints if nil (and closed at once, its
// calls failing, if its owner is closed); the caller holds the owner's lock.
func lazyClient(cli **clientv3.Client, closed bool, endpoints ...string) *clientv3.Client {
	if *cli == nil {
		*cli = mustClient(endpoints...)
		if closed {
			(*cli).Close()
		}
	}
	return *cli
}

// mustClient returns a quiet client of endpoints. clientv3.New fails only
// for a bad configuration, which this package does not make.
func mustClient(endpoints ...string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Notice a dead member promptly.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		// Redial promptly once it is back: gRPC's default backoff (1 s,
		// growing to 2 min) outlasts the short leases of a test.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6,
				Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		panic(fmt.Sprintf("etcdtest: client of %v: %v", endpoints, err))
	}
	return cli
}

// reservePorts returns n distinct free stable loopback ports (see
// stablePort, else the kernel's) for the peer URLs a cluster's members must
// know before any starts.
func reservePorts(n int) ([]int, error) {
	ports := make([]int, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(stablePort())))
		if err != nil {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			return nil, fmt.Errorf("etcdtest: reserving a port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// initialCluster is the InitialCluster setting of members ms.
func initialCluster(ms []*Member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.name + "=" + m.peer.String()
	}
	return strings.Join(parts, ",")
}
