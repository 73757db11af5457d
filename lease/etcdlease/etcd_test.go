package etcdlease_test

// Test tools beside the etcdtest kit (which runs the embedded etcd
// servers): extra clients, and a proxy that cuts a client off a member.

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// newClient returns a client of the given endpoints, closed at cleanup
// (before the etcdtest members stop: cleanups run last-in first-out).
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

// startProxy forwards a loopback port to target (a member's endpoint) and
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
