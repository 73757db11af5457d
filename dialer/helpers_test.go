package dialer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/dialer"
)

const waitFor = 5 * time.Second // how long a test waits for an event that must happen

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newClock() *testclock.Clock { return testclock.NewClock(t0) }

// recorder wraps a DialContext, counting and announcing every dial.
type recorder struct {
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	events chan string // every dialled address, in order; buffered

	mu    sync.Mutex
	addrs []string
}

func newRecorder(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *recorder {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return &recorder{dial: dial, events: make(chan string, 1000)}
}

func (r *recorder) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.addrs = append(r.addrs, addr)
	r.mu.Unlock()
	r.events <- addr
	return r.dial(ctx, network, addr)
}

func (r *recorder) dialled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.addrs)
}

// count returns how many dials went to any of addrs.
func (r *recorder) count(addrs ...string) int {
	n := 0
	for _, a := range r.dialled() {
		if slices.Contains(addrs, a) {
			n++
		}
	}
	return n
}

// next returns the next dialled address, failing the test if none comes.
func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case a := <-r.events:
		return a
	case <-time.After(waitFor):
		t.Fatalf("no dial within %v (dialled so far: %v)", waitFor, r.dialled())
		return ""
	}
}

// quiet asserts no dial has been announced that the test has not consumed.
func (r *recorder) quiet(t *testing.T) {
	t.Helper()
	select {
	case a := <-r.events:
		t.Fatalf("unexpected dial to %s", a)
	default:
	}
}

// fakeConn is a net.Conn that only knows whether it has been closed.
type fakeConn struct {
	net.Conn // nil: only Close is used
	addr     string
	closed   atomic.Int32
}

func (c *fakeConn) Close() error {
	c.closed.Add(1)
	return nil
}

// conns records every fakeConn handed out.
type conns struct {
	mu  sync.Mutex
	all []*fakeConn
}

func (cs *conns) make(addr string) *fakeConn {
	c := &fakeConn{addr: addr}
	cs.mu.Lock()
	cs.all = append(cs.all, c)
	cs.mu.Unlock()
	return c
}

// closedCount returns how many conns were made and how many were closed.
func (cs *conns) closedCount() (made, closed int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.all {
		if c.closed.Load() > 0 {
			closed++
		}
	}
	return len(cs.all), closed
}

func refused(addr string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: fakeAddr(addr), Err: syscall.ECONNREFUSED}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

// busyError is a server's "try again later".
type busyError struct{ after time.Duration }

func (e busyError) Error() string             { return fmt.Sprintf("server busy, retry after %v", e.after) }
func (e busyError) RetryAfter() time.Duration { return e.after }
func (e busyError) Unwrap() error             { return errBusy }

var errBusy = errors.New("busy")

// reservePort returns a loopback port that nothing listens on and that
// nothing else can take before the test ends (see reservation).
func reservePort(t *testing.T) int {
	t.Helper()
	return reserve(t).port
}

func localAddrs(port int) []string {
	p := strconv.Itoa(port)
	return []string{"127.0.0.1:" + p, "[::1]:" + p}
}

// server is a real TCP server on loopback that answers each line with
// "<name> <line>" and stops (closing every connection) at test cleanup.
type server struct {
	name string
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	lines []string
}

func startServer(t *testing.T, name, addr string, handle func(line string) string) *server {
	t.Helper()
	s, err := listenServer(name, addr, handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// listenServer starts a server; the caller stops it.
func listenServer(name, addr string, handle func(line string) string) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return serve(name, ln, handle), nil
}

// serve starts a server on ln; the caller stops it.
func serve(name string, ln net.Listener, handle func(line string) string) *server {
	s := &server{name: name, ln: ln}
	s.wg.Add(1)
	go s.accept(handle)
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }
func (s *server) port() int    { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *server) accept(handle func(string) string) {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, conn)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sc := bufio.NewScanner(conn)
			for sc.Scan() {
				s.mu.Lock()
				s.lines = append(s.lines, sc.Text())
				s.mu.Unlock()
				reply := s.name + " " + sc.Text()
				if handle != nil {
					reply = handle(sc.Text())
				}
				if _, err := fmt.Fprintln(conn, reply); err != nil {
					return
				}
			}
		}()
	}
}

func (s *server) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

func (s *server) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// roundTrip sends line over conn and returns the reply.
func roundTrip(conn net.Conn, line string) (string, error) {
	return roundTripCtx(context.Background(), conn, line)
}

// roundTripCtx is roundTrip bounded by ctx's deadline.
func roundTripCtx(ctx context.Context, conn net.Conn, line string) (string, error) {
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return "", err
		}
	}
	if _, err := fmt.Fprintln(conn, line); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	return reply[:len(reply)-1], nil
}

// dialResult is what a Dial running in a goroutine returns.
type dialResult struct {
	conn  net.Conn
	route dialer.Route
	err   error
}

// goDial runs d.Dial(ctx) in a goroutine.
func goDial(ctx context.Context, d *dialer.Dialer) <-chan dialResult {
	ch := make(chan dialResult, 1)
	go func() {
		conn, route, err := d.Dial(ctx)
		ch <- dialResult{conn, route, err}
	}()
	return ch
}

// result waits for a goDial result.
func result(t *testing.T, ch <-chan dialResult) dialResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatalf("Dial did not return within %v", waitFor)
		return dialResult{}
	}
}

// pending asserts that Dial has not returned yet.
func pending(t *testing.T, ch <-chan dialResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Dial returned early: %+v", r)
	default:
	}
}

func mustNew(t *testing.T, cfg dialer.Config) *dialer.Dialer {
	t.Helper()
	d, err := dialer.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func dialError(t *testing.T, err error) *dialer.DialError {
	t.Helper()
	var de *dialer.DialError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DialError", err, err)
	}
	return de
}

func attemptAddrs(de *dialer.DialError) []string {
	var out []string
	for _, a := range de.Attempts {
		out = append(out, a.Addr)
	}
	return out
}
