package grpcdialer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/dialer/grpcdialer"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

const waitFor = 5 * time.Second // how long a test waits for an event that must happen

const (
	whoMethod  = "/coldstart.test.Controller/Who"
	holdMethod = "/coldstart.test.Controller/Hold"
)

// grpcServer is a real grpc-go server on loopback. Who answers with its
// name; Hold answers "<name> held" once release closes. It tracks its
// connections at the socket.
type grpcServer struct {
	name    string
	srv     *grpc.Server
	entered chan struct{} // a value per Hold that arrived
	release chan struct{}

	mu       sync.Mutex
	open     int
	whos     int
	accepted chan struct{} // a value per connection accepted; buffered
	closed   chan struct{} // a value per connection closed; buffered
}

func startGRPC(t *testing.T, name string, ln net.Listener) *grpcServer {
	t.Helper()
	s := &grpcServer{
		name: name, entered: make(chan struct{}, 16), release: make(chan struct{}),
		accepted: make(chan struct{}, 64), closed: make(chan struct{}, 64),
	}
	s.srv = grpc.NewServer(grpc.UnknownServiceHandler(s.handle))
	served := make(chan struct{})
	go func() { defer close(served); _ = s.srv.Serve(&countingListener{Listener: ln, s: s}) }()
	t.Cleanup(func() {
		s.srv.Stop()
		<-served
	})
	return s
}

// handle serves every method: the test has no generated code, only
// well-known protobuf messages.
func (s *grpcServer) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var in wrapperspb.StringValue
	if err := stream.RecvMsg(&in); err != nil {
		return err
	}
	reply := s.name
	switch method {
	case whoMethod:
		s.mu.Lock()
		s.whos++
		s.mu.Unlock()
	case holdMethod:
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		reply += " held"
	}
	return stream.SendMsg(wrapperspb.String(reply))
}

func (s *grpcServer) counts() (open, whos int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.whos
}

func (s *grpcServer) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(waitFor):
		t.Fatalf("%s: Hold did not arrive", s.name)
	}
}

// waitAccepted waits for the server's first connection. For the local
// server it says the ClientConn has moved: its balancer replaced the
// picker (with one that queues RPCs until the new connection is ready)
// before it dialled.
func (s *grpcServer) waitAccepted(t *testing.T) {
	t.Helper()
	select {
	case <-s.accepted:
	case <-time.After(waitFor):
		t.Fatalf("%s: no connection arrived", s.name)
	}
}

func (s *grpcServer) waitClosedConn(t *testing.T) {
	t.Helper()
	select {
	case <-s.closed:
	case <-time.After(waitFor):
		open, _ := s.counts()
		t.Fatalf("%s: no connection closed (%d open)", s.name, open)
	}
}

type countingListener struct {
	net.Listener
	s *grpcServer
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	l.s.open++
	l.s.mu.Unlock()
	l.s.accepted <- struct{}{}
	return &countedConn{Conn: c, s: l.s}, nil
}

type countedConn struct {
	net.Conn
	s    *grpcServer
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		c.s.open--
		c.s.mu.Unlock()
		c.s.closed <- struct{}{}
	})
	return err
}

func call(ctx context.Context, cc grpc.ClientConnInterface, method string) (string, error) {
	var out wrapperspb.StringValue
	if err := cc.Invoke(ctx, method, wrapperspb.String("hi"), &out); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

func mustCall(t *testing.T, cc grpc.ClientConnInterface, method string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	got, err := call(ctx, cc, method)
	require.NoError(t, err)
	return got
}

type callResult struct {
	reply string
	err   error
}

func callAsync(cc grpc.ClientConnInterface, method string) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
		defer cancel()
		r, err := call(ctx, cc, method)
		ch <- callResult{r, err}
	}()
	return ch
}

func newClient(t *testing.T, d *dialer.Dialer) *grpcdialer.Client {
	t.Helper()
	cc, err := grpcdialer.NewClient(d, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// waitLeaves waits until cc's state is no longer s.
func waitLeaves(t *testing.T, cc *grpcdialer.Client, s connectivity.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.True(t, cc.WaitForStateChange(ctx, s), "the ClientConn stayed %v", s)
}

// The move with grpc-go on both ends: while the local server is not
// listening the ClientConn works through a peer; when LocalReady closes it
// connects locally, the RPC in flight on the peer runs to its end there,
// new RPCs go local (none fails, none reaches the peer), the peer
// connection closes once drained, and the ClientConn is never closed.
// The Dialer's Completed closes at the local connection, not before; its logger has
// the two routes.
func TestClientMovesHomeWhenLocalReadyCloses(t *testing.T) {
	peerLn := listenLoopback(t)
	peer := startGRPC(t, "peer", peerLn)
	local := reserve(t) // not listening yet
	ready := make(chan struct{})
	h := logtest.New()
	d, err := dialer.New(dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Millisecond, // fall back to the peer at once
		Logger:          h.Logger(),
	})
	require.NoError(t, err)
	cc := newClient(t, d)
	require.NotNil(t, d.Completed())

	assert.Equal(t, "peer", mustCall(t, cc, whoMethod))
	assert.False(t, isClosed(d.Completed()), "a peer connection is not home")
	held := callAsync(cc, holdMethod)
	peer.waitEntered(t)
	_, peerWhos := peer.counts()

	ln, err := local.listen()
	require.NoError(t, err)
	home := startGRPC(t, "local", ln)
	close(ready)
	home.waitAccepted(t) // the move is asynchronous: wait for it
	for range 3 {
		assert.Equal(t, "local", mustCall(t, cc, whoMethod))
	}
	assert.True(t, isClosed(d.Completed()), "the local connection is")
	open, _ := peer.counts()
	assert.Equal(t, 1, open, "the peer connection busy with Hold must stay open")

	close(peer.release)
	select {
	case r := <-held:
		require.NoError(t, r.err, "the RPC in flight at the move failed")
		assert.Equal(t, "peer held", r.reply)
	case <-time.After(2 * waitFor):
		t.Fatal("the RPC in flight at the move did not return")
	}
	peer.waitClosedConn(t)
	open, whos := peer.counts()
	assert.Equal(t, 0, open)
	assert.Equal(t, peerWhos, whos, "an RPC sent after the move reached the peer")
	_, homeWhos := home.counts()
	assert.Equal(t, 3, homeWhos)
	assert.Equal(t, "local", mustCall(t, cc, whoMethod), "the ClientConn still works")

	routes := h.Records()
	require.Len(t, routes, 2, "the routes, and nothing else: %v", routes)
	for _, r := range routes {
		assert.Equal(t, "route chosen", r.Message)
		assert.Equal(t, slog.LevelInfo, r.Level)
	}
	assert.Equal(t, "peer", routes[0].Str("route"))
	assert.Equal(t, "local", routes[1].Str("route"))
	assert.Equal(t, dialer.Report{LocalReady: true, LocalDials: 1, PeerDials: 1, Fallbacks: 1}, d.Report())
}

// An RPC sent while the Dialer still waits out its grace for a local
// server that is not listening is served locally once LocalReady closes,
// without the peer ever being dialled.
func TestRPCWaitingForTheLocalServerGoesLocal(t *testing.T) {
	peerLn := listenLoopback(t)
	peer := startGRPC(t, "peer", peerLn)
	local := reserve(t)
	ready := make(chan struct{})
	d, err := dialer.New(dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Hour,
	})
	require.NoError(t, err)
	cc := newClient(t, d)

	res := callAsync(cc, whoMethod)
	waitLeaves(t, cc, connectivity.Idle) // connecting: the Dial waits for LocalReady
	ln, err := local.listen()
	require.NoError(t, err)
	startGRPC(t, "local", ln)
	close(ready)
	select {
	case r := <-res:
		require.NoError(t, r.err)
		assert.Equal(t, "local", r.reply)
	case <-time.After(2 * waitFor):
		t.Fatal("the RPC did not return")
	}
	open, whos := peer.counts()
	assert.Equal(t, 0, open+whos, "the peer was dialled")
}

// With LocalReady closed before the ClientConn is made, it goes local from
// the start and stays on its one connection.
func TestClientWithLocalAlreadyReady(t *testing.T) {
	ln := listenLoopback(t)
	home := startGRPC(t, "local", ln)
	ready := make(chan struct{})
	close(ready)
	d, err := dialer.New(dialer.Config{LocalPort: ln.Addr().(*net.TCPAddr).Port, LocalReady: ready})
	require.NoError(t, err)
	cc := newClient(t, d)
	for range 2 {
		assert.Equal(t, "local", mustCall(t, cc, whoMethod))
	}
	open, _ := home.counts()
	assert.Equal(t, 1, open)
}

// A machine without a controller (LocalPort 0) dials its peers and never
// moves.
func TestClientWithoutALocalController(t *testing.T) {
	peerLn := listenLoopback(t)
	startGRPC(t, "peer", peerLn)
	d, err := dialer.New(dialer.Config{
		Policy: dialer.PreferLocal,
		Remote: func() []string { return []string{peerLn.Addr().String()} },
	})
	require.NoError(t, err)
	cc := newClient(t, d)
	assert.Equal(t, "peer", mustCall(t, cc, whoMethod))
}

func TestNewClientRejectsANilDialer(t *testing.T) {
	_, err := grpcdialer.NewClient(nil)
	require.ErrorIs(t, err, errors.NotValid)
}

// Under RequireLocal the ClientConn is local from its first connection:
// LocalReady closing must not make it reconnect (before the fix its
// resolver moved it to a second local connection).
// A move happens within milliseconds of LocalReady closing; the test waits
// a second for a second connection that must not come.
func TestClientUnderRequireLocalNeverMoves(t *testing.T) {
	ln := listenLoopback(t)
	home := startGRPC(t, "local", ln)
	ready := make(chan struct{})
	d, err := dialer.New(dialer.Config{
		LocalPort:  ln.Addr().(*net.TCPAddr).Port,
		Policy:     dialer.RequireLocal,
		LocalReady: ready,
	})
	require.NoError(t, err)
	cc := newClient(t, d)
	assert.Equal(t, "local", mustCall(t, cc, whoMethod))
	home.waitAccepted(t)

	close(ready)
	select {
	case <-home.accepted:
		t.Fatal("the ClientConn reconnected when LocalReady closed")
	case <-time.After(time.Second):
	}
	assert.Equal(t, "local", mustCall(t, cc, whoMethod))
	open, _ := home.counts()
	assert.Equal(t, 1, open)
}

// With TLS, the ClientConn verifies the controllers' certificates against
// the name given in tls.Config.ServerName or by grpc.WithAuthority; the
// default authority, "controller", names no certificate, and the
// handshake fails saying so.
func TestClientWithTLSNeedsTheServerName(t *testing.T) {
	const name = "juju-apiserver"
	cert, pool := selfSigned(t, name)
	ln := listenLoopback(t)
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in wrapperspb.StringValue
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		return stream.SendMsg(wrapperspb.String("tls"))
	}))
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-served }()
	ready := make(chan struct{})
	close(ready)
	d, err := dialer.New(dialer.Config{LocalPort: ln.Addr().(*net.TCPAddr).Port, LocalReady: ready})
	require.NoError(t, err)

	dial := func(opts ...grpc.DialOption) (string, error) {
		cc, err := grpcdialer.NewClient(d, opts...)
		require.NoError(t, err)
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		return call(ctx, cc, whoMethod)
	}
	_, err = dial(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not "+grpcdialer.Authority)

	reply, err := dial(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: name})))
	require.NoError(t, err)
	assert.Equal(t, "tls", reply)

	reply, err = dial(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})), grpc.WithAuthority(name))
	require.NoError(t, err)
	assert.Equal(t, "tls", reply)
}

// selfSigned returns a certificate for name and a pool that trusts it.
func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A nil DialOption is ignored, as the rule for options says (grpc.NewClient
// would panic on it).
func TestNewClientIgnoresANilOption(t *testing.T) {
	ln := listenLoopback(t)
	startGRPC(t, "local", ln)
	ready := make(chan struct{})
	close(ready)
	d, err := dialer.New(dialer.Config{LocalPort: ln.Addr().(*net.TCPAddr).Port, LocalReady: ready})
	require.NoError(t, err)
	cc, err := grpcdialer.NewClient(d, nil, grpc.WithTransportCredentials(insecure.NewCredentials()), nil)
	require.NoError(t, err)
	defer cc.Close()
	assert.Equal(t, "local", mustCall(t, cc, whoMethod))
	assert.True(t, isClosed(d.Completed()), "a local connection after LocalReady: home")
}
