package sdnotify_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/sdnotify"
)

var t0 = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

// guard bounds every wait for Run: reaching it is a failure, never part of
// the expected timing.
const guard = 5 * time.Second

// socket is a notify socket, as systemd listens on one, that NOTIFY_SOCKET
// names for the test.
type socket struct {
	t    *testing.T
	conn *net.UnixConn
}

func listen(t *testing.T) *socket {
	t.Helper()
	// A short directory: a socket's path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "sd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
	return &socket{t: t, conn: conn}
}

// next returns the next datagram systemd would read.
func (s *socket) next() string {
	s.t.Helper()
	require.NoError(s.t, s.conn.SetReadDeadline(time.Now().Add(guard)))
	buf := make([]byte, 4096)
	n, err := s.conn.Read(buf)
	require.NoError(s.t, err, "no datagram")
	return string(buf[:n])
}

// none asserts that no datagram is waiting: a datagram is in the socket
// once the write that sent it returned, so the caller first makes sure Run
// is past the look (its next timer armed).
func (s *socket) none() {
	s.t.Helper()
	raw, err := s.conn.SyscallConn()
	require.NoError(s.t, err)
	buf := make([]byte, 4096)
	var (
		n       int
		recvErr error
	)
	require.NoError(s.t, raw.Read(func(fd uintptr) bool {
		n, _, recvErr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
		return true // asked once, never waited for
	}))
	require.ErrorIs(s.t, recvErr, syscall.EAGAIN, "a datagram: %q", buf[:max(n, 0)])
}

// run starts Run and returns a func that ends it and checks it returned nil.
func run(t *testing.T, cfg sdnotify.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sdnotify.Run(ctx, cfg) }()
	return func() {
		t.Helper()
		cancel()
		require.NoError(t, <-done)
	}
}

// advance moves the clock by d once Run's n timers are armed, that is once
// it has done the work before them.
func advance(t *testing.T, clk *testclock.Clock, d time.Duration, n int) {
	t.Helper()
	require.NoError(t, clk.WaitAdvance(d, guard, n))
}

const extend = "EXTEND_TIMEOUT_USEC=10000000"

// READY=1 when the chosen gate opens, STATUS= what startup waits on in the
// board's words, EXTEND_TIMEOUT_USEC= at a look after an entry opened and
// not at one after nothing did, nor once ready.
func TestReadyStatusAndExtendWhileEntriesOpen(t *testing.T) {
	sock := listen(t)
	clk := testclock.NewClock(t0)
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	defer board.Close()
	port, steps := gate.New("controller-port"), gate.New("upgrade")
	stable := gate.AllOf("stable", port, steps)
	board.Add("controller-port", port)
	board.Add("upgrade", steps)
	board.Add("stable", stable)

	stop := run(t, sdnotify.Config{Board: board, Ready: stable, Clock: clk, Window: 10 * time.Second})
	defer stop()
	assert.Equal(t, "STATUS=waiting on controller-port (0s), upgrade (0s), stable (0s); 0 open", sock.next())

	port.Unlock()
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on upgrade (1s), stable (1s); 1 open\n"+extend, sock.next())

	advance(t, clk, time.Second, 1) // stalled: no extension
	assert.Equal(t, "STATUS=waiting on upgrade (2s), stable (2s); 1 open", sock.next())
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on upgrade (3s), stable (3s); 1 open", sock.next())

	steps.Unlock()
	assert.Equal(t, "READY=1\nSTATUS=3 open", sock.next())
	advance(t, clk, time.Second, 1) // nothing changed: nothing sent
	advance(t, clk, 0, 1)
	sock.none()
}

// STOPPING=1 when the board drains, and the drain's steps extend the stop
// timeout as startup's extend the start's, only while they keep opening.
func TestStoppingAndExtendWhileTheDrainProceeds(t *testing.T) {
	sock := listen(t)
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	board := gate.NewBoard(gate.BoardConfig{Clock: clk, Drain: drain})
	defer board.Close()
	serving := gate.New("serving")
	board.Add("serving", serving)

	stop := run(t, sdnotify.Config{Board: board, Ready: serving, Clock: clk, Window: 10 * time.Second})
	defer stop()
	assert.Equal(t, "STATUS=waiting on serving (0s); 0 open", sock.next())
	serving.Unlock()
	assert.Equal(t, "READY=1\nSTATUS=1 open", sock.next())

	close(drain)
	assert.Equal(t, "STOPPING=1\nSTATUS=waiting on draining (0s); 1 open", sock.next())
	grace := gate.New("grace over")
	board.Add("grace over", grace)
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on draining (1s), grace over (1s); 1 open", sock.next())
	grace.Unlock()
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on draining (2s); 2 open\n"+extend, sock.next())
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on draining (3s); 2 open", sock.next())
}

// alive is a component whose Alive says what the test sets.
type alive struct{ err atomic.Pointer[error] }

func (a *alive) Alive() error {
	if p := a.err.Load(); p != nil {
		return *p
	}
	return nil
}

// WATCHDOG=1 every half of WATCHDOG_USEC, only while every component is
// alive.
func TestWatchdogOnlyWhileAlive(t *testing.T) {
	sock := listen(t)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "") // any process
	clk := testclock.NewClock(t0)
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	defer board.Close()
	ready := gate.New("ready")
	board.Add("ready", ready)
	ok, sick := &alive{}, &alive{}

	// Looks an hour apart: only the watchdog's timer fires.
	stop := run(t, sdnotify.Config{Board: board, Ready: ready, Clock: clk, Interval: time.Hour, Window: 2 * time.Hour,
		Alive: []interface{ Alive() error }{ok, sick}})
	defer stop()
	assert.Equal(t, "STATUS=waiting on ready (0s); 0 open", sock.next())
	advance(t, clk, time.Second, 2)
	assert.Equal(t, "WATCHDOG=1", sock.next())

	err := errors.New("lease tracker stuck")
	sick.err.Store(&err)
	advance(t, clk, time.Second, 2)
	advance(t, clk, 0, 2)
	sock.none()
	advance(t, clk, time.Second, 2)
	advance(t, clk, 0, 2)
	sock.none()

	sick.err.Store(nil)
	advance(t, clk, time.Second, 2)
	assert.Equal(t, "WATCHDOG=1", sock.next())
}

// Not under systemd, Run does nothing and says nothing is wrong.
func TestWithoutNotifySocketRunIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	// No ctx end needed: it returns at once.
	assert.NoError(t, sdnotify.Run(context.Background(), sdnotify.Config{Board: board, Ready: gate.New("ready")}))
}

// A socket nobody listens on is an error, not a silent loss.
func TestUnreachableSocketIsAnError(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	err := sdnotify.Run(context.Background(), sdnotify.Config{Board: board, Ready: gate.New("ready")})
	assert.ErrorContains(t, err, "sdnotify: ")
}

func TestConfigValidate(t *testing.T) {
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	ready := gate.New("ready")
	for _, tc := range []struct {
		cfg  sdnotify.Config
		want string
	}{
		{sdnotify.Config{Ready: ready}, "nil Board not valid"},
		{sdnotify.Config{Board: board}, "nil Ready (must be the gate whose opening sends READY=1) not valid"},
		{sdnotify.Config{Board: board, Ready: ready, Window: -1}, "Window -1ns (must be positive, or 0 for the default 30s) not valid"},
		{sdnotify.Config{Board: board, Ready: ready, Interval: 30 * time.Second}, "Interval 30s (must be in [0, Window=30s): 0 for the default 1s) not valid"},
		{sdnotify.Config{Board: board, Ready: ready, Alive: []interface{ Alive() error }{nil}}, "nil Alive[0] not valid"},
	} {
		err := tc.cfg.Validate()
		assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)
		assert.EqualError(t, err, tc.want)
		assert.Equal(t, err, sdnotify.Run(context.Background(), tc.cfg))
	}
	assert.NoError(t, sdnotify.Config{Board: board, Ready: ready}.Validate())
}

// STATUS= is one line however the board's words read.
func TestStatusIsOneBoundedLine(t *testing.T) {
	sock := listen(t)
	board := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	defer board.Close()
	ready := gate.New("ready")
	board.Add("ready", ready)
	for i := range 20 {
		board.Add(strings.Repeat("x", 200)+"\n"+string(rune('a'+i)), gate.New("x"))
	}
	stop := run(t, sdnotify.Config{Board: board, Ready: ready})
	defer stop()
	got := sock.next()
	assert.NotContains(t, got, "\n")
	assert.LessOrEqual(t, len(got), len("STATUS=")+1024)
	assert.True(t, strings.HasSuffix(got, "…"), got)
}

// A board that drains before its chosen gate opens never says READY=1:
// systemd would take the stopping unit for started.
func TestNoReadyAfterStopping(t *testing.T) {
	sock := listen(t)
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	board := gate.NewBoard(gate.BoardConfig{Clock: clk, Drain: drain})
	defer board.Close()
	ready := gate.New("ready")
	board.Add("ready", ready)

	stop := run(t, sdnotify.Config{Board: board, Ready: ready, Clock: clk})
	defer stop()
	assert.Equal(t, "STATUS=waiting on ready (0s); 0 open", sock.next())
	close(drain)
	assert.Equal(t, "STOPPING=1\nSTATUS=waiting on ready (0s), draining (0s); 0 open", sock.next())
	ready.Unlock()
	advance(t, clk, time.Second, 1)
	assert.Equal(t, "STATUS=waiting on draining (1s); 1 open\nEXTEND_TIMEOUT_USEC=30000000", sock.next())
}
