package faultnet_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/faultnet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is a target that greets each connection with "hi", echoes what
// it reads, and records every byte it received.
type server struct {
	l  net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	got   []byte
	conns []net.Conn
}

func startServer(t *testing.T) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &server{l: l}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		return
	}
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.got = append(s.got, buf[:n]...)
			s.mu.Unlock()
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// received returns what the server has read so far.
func (s *server) received() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.got)
}

func (s *server) addr() string { return s.l.Addr().String() }

func listen(t *testing.T, target string, cfg faultnet.Config) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Listen(target, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *faultnet.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// readN reads exactly n bytes from c, within 10s.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	require.NoError(t, err)
	return string(buf)
}

// requireClosed fails unless c was closed by the proxy: a read ends with
// an error that is not a timeout.
func requireClosed(t *testing.T, c net.Conn, which string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: still open after 10s", which)
}

// awaitHeld waits until the proxy holds n chunks.
func awaitHeld(t *testing.T, p *faultnet.Proxy, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Held() == n }, 10*time.Second, time.Millisecond,
		"the proxy holds %d chunks, not %d", p.Held(), n)
}

// Without a fault, bytes cross both ways.
func TestForwards(t *testing.T) {
	s := startServer(t)
	c := dial(t, listen(t, s.addr(), faultnet.Config{}))
	require.Equal(t, "hi", readN(t, c, 2))
	_, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, "abc", readN(t, c, 3))
	require.Equal(t, "abc", s.received())
}

// A paused path holds what crosses it on a connection that stays open,
// and delivers it, in order, at the heal.
func TestPauseHoldsThenDelivers(t *testing.T) {
	s := startServer(t)
	p := listen(t, s.addr(), faultnet.Config{})
	c := dial(t, p)
	require.Equal(t, "hi", readN(t, c, 2))

	p.Path().Set(faultnet.Pause, 0)
	_, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	awaitHeld(t, p, 1)
	require.Empty(t, s.received(), "a paused path let bytes through")

	p.Path().Set(faultnet.None, 0)
	require.Equal(t, "abc", readN(t, c, 3), "the held bytes arrive at the heal, and their echo")
	require.Equal(t, "abc", s.received())
	awaitHeld(t, p, 0)
}

// A cut path holds what crosses it; at the heal the connection is closed
// and what it held is lost. New connections cross the healed path.
func TestCutLosesHeldBytesAtTheHeal(t *testing.T) {
	s := startServer(t)
	p := listen(t, s.addr(), faultnet.Config{})
	c := dial(t, p)
	require.Equal(t, "hi", readN(t, c, 2))

	p.Path().Set(faultnet.Cut, 0)
	require.Equal(t, faultnet.Cut, p.Path().Fault())
	_, err := c.Write([]byte("lost"))
	require.NoError(t, err)
	awaitHeld(t, p, 1)

	p.Path().Set(faultnet.None, 0)
	requireClosed(t, c, "a connection that lived through the cut")
	awaitHeld(t, p, 0)
	require.Empty(t, s.received(), "bytes held by a cut arrived")

	c2 := dial(t, p)
	require.Equal(t, "hi", readN(t, c2, 2))
	_, err = c2.Write([]byte("x"))
	require.NoError(t, err)
	require.Equal(t, "x", readN(t, c2, 1))
}

// A refused path closes every connection, open or new; healed, it
// forwards again.
func TestRefuseClosesConnections(t *testing.T) {
	s := startServer(t)
	p := listen(t, s.addr(), faultnet.Config{})
	open := dial(t, p)
	require.Equal(t, "hi", readN(t, open, 2))

	p.Path().Set(faultnet.Refuse, 0)
	requireClosed(t, open, "a connection open before Refuse")
	requireClosed(t, dial(t, p), "a connection made after Refuse")

	p.Path().Set(faultnet.None, 0)
	require.Equal(t, "hi", readN(t, dial(t, p), 2))
}

// A slow path delays each chunk by its delay: a round trip takes at least
// twice that (no upper bound: the machine may be busy). Slow with no
// delay is no fault.
func TestSlowAddsLatency(t *testing.T) {
	const d = 50 * time.Millisecond
	s := startServer(t)
	p := listen(t, s.addr(), faultnet.Config{})
	c := dial(t, p)
	require.Equal(t, "hi", readN(t, c, 2))

	p.Path().Set(faultnet.Slow, d)
	for range 3 {
		start := time.Now()
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
		require.Equal(t, "x", readN(t, c, 1))
		require.GreaterOrEqual(t, time.Since(start), 2*d)
	}
	p.Path().Set(faultnet.Slow, 0)
	require.Equal(t, faultnet.None, p.Path().Fault())
}

// A Route gives each direction its own path: one paused holds only its
// way (the server's greeting still arrives); a connection it declines is
// closed.
func TestRouteFaultsOneDirection(t *testing.T) {
	s := startServer(t)
	var up, down faultnet.Path
	decline := make(chan bool, 2)
	decline <- false
	decline <- true
	p := listen(t, s.addr(), faultnet.Config{Route: func(net.Conn) (*faultnet.Path, *faultnet.Path, bool) {
		return &up, &down, !<-decline
	}})
	up.Set(faultnet.Pause, 0)
	c := dial(t, p)
	require.Equal(t, "hi", readN(t, c, 2), "the way back is open")
	_, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	awaitHeld(t, p, 1)
	require.Empty(t, s.received())
	up.Set(faultnet.None, 0)
	require.Equal(t, "abc", readN(t, c, 3))

	requireClosed(t, dial(t, p), "a connection the route declined")
}

// With Wait, a connection made while the target is down waits for the
// next SetTarget; without, it is closed.
func TestWaitForTarget(t *testing.T) {
	s := startServer(t)
	p := listen(t, "", faultnet.Config{Wait: true})
	c := dial(t, p)
	_, err := c.Write([]byte("early"))
	require.NoError(t, err)
	p.SetTarget(s.addr())
	require.Equal(t, "hi", readN(t, c, 2))
	require.Equal(t, "early", readN(t, c, 5))

	requireClosed(t, dial(t, listen(t, "", faultnet.Config{})), "a connection to a target that is down")
}

// Close closes every connection, held bytes and all, and the port
// (goleak, in TestMain, sees no goroutine of the proxy left).
func TestCloseEndsEverything(t *testing.T) {
	s := startServer(t)
	p := listen(t, s.addr(), faultnet.Config{})
	c := dial(t, p)
	require.Equal(t, "hi", readN(t, c, 2))
	p.Path().Set(faultnet.Pause, 0)
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	awaitHeld(t, p, 1)

	p.Close()
	requireClosed(t, c, "a connection of a closed proxy")
	require.Zero(t, p.Held())
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "the port of a closed proxy")
	p.Close() // idempotent
}

func TestFaultString(t *testing.T) {
	for f, want := range map[faultnet.Fault]string{
		faultnet.None: "none", faultnet.Slow: "slow", faultnet.Pause: "pause",
		faultnet.Cut: "cut", faultnet.Refuse: "refuse", faultnet.Fault(7): "Fault(7)",
	} {
		require.Equal(t, want, f.String())
	}
}
