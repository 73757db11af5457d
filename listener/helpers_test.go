package listener_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/listener"
)

// guard bounds every wait on another goroutine: reaching it is a failure,
// never part of the expected timing.
const guard = 5 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func loopback(cfg listener.Config) listener.Config {
	if cfg.ControllerAddr == "" {
		cfg.ControllerAddr = "127.0.0.1:0"
	}
	if cfg.APIAddr == "" {
		cfg.APIAddr = "127.0.0.1:0"
	}
	return cfg
}

// newListener builds a listener on loopback port 0 and closes it at the end.
func newListener(t *testing.T, cfg listener.Config) *listener.Listener {
	t.Helper()
	l, err := listener.New(loopback(cfg))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dial(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	require.NotNil(t, addr, "dialling an unbound port")
	c, err := net.DialTimeout("tcp", addr.String(), guard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type acceptResult struct {
	c   net.Conn
	err error
}

// acceptAsync calls Accept once in a goroutine. The caller must receive the
// result (Close unblocks it), so nothing leaks.
func acceptAsync(l net.Listener) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept()
		ch <- acceptResult{c, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan acceptResult) (net.Conn, error) {
	t.Helper()
	select {
	case r := <-ch:
		if r.c != nil {
			t.Cleanup(func() { _ = r.c.Close() })
		}
		return r.c, r.err
	case <-time.After(guard):
		t.Fatal("Accept did not return")
		return nil, nil
	}
}

// mustAccept accepts one connection and checks the port it came in on.
func mustAccept(t *testing.T, l net.Listener, want listener.Port) net.Conn {
	t.Helper()
	c, err := receive(t, acceptAsync(l))
	require.NoError(t, err)
	require.Equal(t, want, listener.PortOf(c))
	return c
}

// assertSamePeer checks that the server side s is the other end of client c.
func assertSamePeer(t *testing.T, s, c net.Conn) {
	t.Helper()
	require.Equal(t, c.LocalAddr().String(), s.RemoteAddr().String())
}

// assertClosedByPeer checks that the peer of c has been closed.
func assertClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(guard)); err != nil {
		// net.Pipe refuses deadlines once either end is closed.
		require.ErrorIs(t, err, io.ErrClosedPipe)
		return
	}
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	if errors.As(err, &ne) {
		require.False(t, ne.Timeout(), "peer still open: %v", err)
	}
}

// assertEcho checks a server-side conn still works: it writes through s
// and reads it back on the client c.
func assertEcho(t *testing.T, s, c net.Conn) {
	t.Helper()
	msg := []byte("ping")
	errc := make(chan error, 1)
	go func() { _, err := s.Write(msg); errc <- err }()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(guard)))
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	require.NoError(t, <-errc)
}

// waitAlarm waits for the code under test to arm a timer on clk.
func waitAlarm(t *testing.T, clk *testclock.Clock) {
	t.Helper()
	select {
	case <-clk.Alarms():
	case <-time.After(guard):
		t.Fatal("no timer armed")
	}
}

// fakeListener is an inner listener whose Accept results the test scripts.
type fakeListener struct {
	addr    net.Addr
	results chan acceptResult
	closed  chan struct{}
	once    sync.Once
}

func newFake(port int) *fakeListener {
	return &fakeListener{
		addr:    &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
		results: make(chan acceptResult),
		closed:  make(chan struct{}),
	}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case r := <-f.results:
		return r.c, r.err
	case <-f.closed:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.addr, Err: net.ErrClosed}
	}
}

func (f *fakeListener) Close() error {
	err := error(&net.OpError{Op: "close", Net: "tcp", Addr: f.addr, Err: net.ErrClosed})
	f.once.Do(func() { close(f.closed); err = nil })
	return err
}

func (f *fakeListener) Addr() net.Addr { return f.addr }

func (f *fakeListener) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// give hands one Accept result to the port goroutine. It returns once the
// goroutine has taken it, i.e. once the goroutine is (back) in Accept.
func (f *fakeListener) give(t *testing.T, c net.Conn, err error) {
	t.Helper()
	select {
	case f.results <- acceptResult{c, err}:
	case <-time.After(guard):
		t.Fatal("the port goroutine is not in Accept")
	}
}

// givePipe hands the goroutine one end of a pipe and returns the other.
func (f *fakeListener) givePipe(t *testing.T) net.Conn {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	f.give(t, server, nil)
	return client
}

// listenSeq returns a listen func that serves the given listeners in
// order (nil means a real socket) and counts calls.
type listenSeq struct {
	mu    sync.Mutex
	fakes []net.Listener
	calls int
}

func (s *listenSeq) listen(network, addr string) (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.calls
	s.calls++
	if i < len(s.fakes) && s.fakes[i] != nil {
		return s.fakes[i], nil
	}
	return net.Listen(network, addr)
}

func (s *listenSeq) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}
