package etcdlease_test

// Embedded etcd for the tests: real servers, in this process, on loopback,
// with their data in t.TempDir().
//
// Ports. Client listeners bind 127.0.0.1:0 and the tests read the bound
// address back from the listener (embed allows it: clients never need to
// know a member's advertised client URL, only the address we hand them).
// A single member may bind its peer port to :0 too, as nobody dials it. A
// cluster's members must know each other's peer URLs before they start, so
// for a cluster we reserve ports: hold a listener on 127.0.0.1:0 for every
// member at once (so the kernel hands out distinct ports), close them all
// and start the members on them at once. Another process could take one of
// those ports in between; StartEtcd then fails to bind and startCluster
// retries with fresh ports, a bounded number of times.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Timing of the embedded members. etcd's minimum lease TTL is
// 1.5 × election timeout: with 50 ms ticks and a 500 ms election timeout it
// is 750 ms, so a 1 s claim is granted as asked.
const (
	tickMs     = 50
	electionMs = 500
	// Slower timing for the cluster, so that -race on two busy cores does
	// not trigger spurious elections, and so that a killed leader leaves
	// the survivors unsure for at least clusterElectionMs: they do not
	// campaign before their election timeout. Its minimum TTL is 1.5 s, so
	// its leases are granted in whole seconds ≥ 2.
	clusterTickMs     = 100
	clusterElectionMs = 1000
)

type member struct {
	name      string
	etcd      *embed.Etcd
	clientURL string // the address we hand to clients: http://127.0.0.1:port
	stopped   bool
}

func memberConfig(t testing.TB, name, dir string, peer url.URL, tick, election uint) *embed.Config {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.TickMs = tick
	cfg.ElectionMs = election
	cfg.UnsafeNoFsync = true // test data, thrown away
	client := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialClusterToken = "etcdlease-test"
	return cfg
}

func waitReady(t testing.TB, e *embed.Etcd) {
	t.Helper()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		t.Fatalf("etcd failed to start: %v", err)
	case <-time.After(20 * time.Second):
		e.Close()
		t.Fatal("etcd not ready after 20s")
	}
}

func newMember(name string, e *embed.Etcd) *member {
	return &member{name: name, etcd: e, clientURL: "http://" + e.Clients[0].Addr().String()}
}

// stop crashes the member: it stops raft without handing leadership over
// (HardStop), as a killed process would, then closes its listeners.
func (m *member) stop() {
	if m.stopped {
		return
	}
	m.stopped = true
	m.etcd.Server.HardStop()
	m.etcd.Close()
}

// startSingle starts a one-member etcd and returns it with a client.
func startSingle(t testing.TB) (*member, *clientv3.Client) {
	t.Helper()
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := memberConfig(t, "single", t.TempDir(), peer, tickMs, electionMs)
	cfg.InitialCluster = "single=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	waitReady(t, e)
	m := newMember("single", e)
	t.Cleanup(m.stop)
	cli := newClient(t, m.clientURL)
	return m, cli
}

// newClient returns a client of the given endpoints, closed at cleanup
// (before the members stop: cleanups run last-in first-out).
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	return newClientWith(t, nil, endpoints...)
}

// newClientWith is newClient with extra gRPC dial options.
func newClientWith(t testing.TB, dial []grpc.DialOption, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		DialOptions: dial,
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Notice a dead member promptly.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// reservePorts returns n distinct free loopback ports (see the file comment).
func reservePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	ls := make([]net.Listener, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startCluster starts an n-member cluster and waits until every member has
// joined it and it has a leader.
func startCluster(t testing.TB, n int) []*member {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ms, err := tryStartCluster(t, n)
		if err == nil {
			t.Cleanup(func() {
				for _, m := range ms {
					m.stop()
				}
				awaitPeerHTTPClosed(t)
			})
			return ms
		}
		lastErr = err
	}
	t.Fatalf("starting a %d-member etcd cluster: %v", n, lastErr)
	return nil
}

func tryStartCluster(t testing.TB, n int) ([]*member, error) {
	ports := reservePorts(t, n)
	names := make([]string, n)
	peers := make([]url.URL, n)
	var initial []string
	for i := range n {
		names[i] = fmt.Sprintf("m%d", i)
		peers[i] = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
		initial = append(initial, names[i]+"="+peers[i].String())
	}
	var ms []*member
	stopAll := func() {
		for _, m := range ms {
			m.stop()
		}
	}
	for i := range n {
		cfg := memberConfig(t, names[i], t.TempDir(), peers[i], clusterTickMs, clusterElectionMs)
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			stopAll()
			return nil, err
		}
		ms = append(ms, newMember(names[i], e))
	}
	timeout := time.After(20 * time.Second)
	for _, m := range ms {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			stopAll()
			return nil, err
		case <-timeout:
			stopAll()
			return nil, fmt.Errorf("cluster not ready after 20s")
		}
	}
	return ms, nil
}

// awaitPeerHTTPClosed waits, after a cluster has stopped, for the
// goroutines of its members' peer HTTP connections to end, so that goleak
// (which checks once every test has run) sees none. They are etcd's, and
// they end by themselves, but late: a member forwards lease renewals to the
// leader through a peer http.Transport that etcd never closes, and both ends
// of those connections wrap reads in rafthttp's 5 s ConnReadTimeout, which
// also delays the server's abort of a pending read. So they linger up to
// ~5 s after the members stop. Nothing else in this test binary uses
// net/http, so "no goroutine in net/http" is exactly "they are gone". The
// wait is bounded; past it the test fails with the stacks.
func awaitPeerHTTPClosed(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(3 * rafthttpConnReadTimeout)
	for {
		left := goroutinesIn("net/http.")
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd peer HTTP goroutines still running %v after the cluster stopped:\n%s",
				3*rafthttpConnReadTimeout, strings.Join(left, "\n\n"))
		}
		<-time.After(50 * time.Millisecond)
	}
}

// rafthttpConnReadTimeout is rafthttp.ConnReadTimeout.
const rafthttpConnReadTimeout = 5 * time.Second

// goroutinesIn returns the stacks of the goroutines with a frame whose
// function name starts with prefix.
func goroutinesIn(prefix string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, prefix) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// leaderOf returns the index of the member that leads the cluster, as the
// members themselves report it.
func leaderOf(t testing.TB, ms []*member) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		for i, m := range ms {
			if !m.stopped && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
				return i
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no leader after 10s")
		case <-time.After(clusterTickMs * time.Millisecond):
		}
	}
}

// proxy forwards TCP connections to a member's client port, so that a test
// can cut a client off that member at once: an in-process member stopped
// with HardStop keeps serving its open client streams (lease renewals
// included) until its gRPC server's graceful stop ends them, which a
// crashed process would not.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// startProxy forwards a loopback port to target (a member's clientURL) and
// returns it; it is cut at cleanup.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{l: l, target: strings.TrimPrefix(target, "http://")}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.cut)
	return p
}

// url is the address clients dial instead of the member's.
func (p *proxy) url() string { return "http://" + p.l.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.copy(in, out)
		go p.copy(out, in)
	}
}

func (p *proxy) copy(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut closes the port and every forwarded connection, and waits for the
// forwarding goroutines to end. It is idempotent.
func (p *proxy) cut() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// reopen listens again on the port cut closed, forwarding to the same
// target, as a member restarted on its old address would.
func (p *proxy) reopen(t testing.TB) {
	t.Helper()
	l, err := net.Listen("tcp", p.l.Addr().String())
	require.NoError(t, err)
	p.mu.Lock()
	p.l, p.conns = l, nil
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
}
