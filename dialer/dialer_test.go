package dialer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/juju/clock"
	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/dialer"
)

// After LocalReady has closed, a controller dials only itself — even when
// its own server is down and every peer would answer — retrying with capped
// backoff until ctx ends. This is the load-shedding guarantee.
func TestAfterReadyNeverDialsPeerEvenWithLocalDown(t *testing.T) {
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	port := reservePort(t) // the local server is down: nothing listens
	ready := make(chan struct{})
	close(ready)
	rec := newRecorder(nil) // real TCP
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:   port,
		Remote:      func() []string { return []string{peer.addr()} },
		LocalReady:  ready,
		Clock:       clk,
		DialContext: rec.DialContext,
		MinBackoff:  100 * time.Millisecond,
		MaxBackoff:  400 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := goDial(ctx, d)

	local := localAddrs(port)
	ceilings := []time.Duration{100, 200, 400, 400, 400, 400} // ms: doubling, capped
	for round, ceiling := range ceilings {
		// Each round: IPv4 loopback first, then IPv6 when it is refused.
		require.Equal(t, local[0], rec.next(t), "round %d", round)
		require.Equal(t, local[1], rec.next(t), "round %d", round)
		// The backoff pause is the only timer; advancing by its ceiling
		// always fires it, whatever the jitter drew.
		require.NoError(t, clk.WaitAdvance(ceiling*time.Millisecond, waitFor, 1), "round %d", round)
	}
	require.Equal(t, local[0], rec.next(t))
	require.Equal(t, local[1], rec.next(t))
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // parked in backoff again
	cancel()

	r := result(t, done)
	require.Error(t, r.err)
	assert.Nil(t, r.conn)
	assert.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
	assert.False(t, errors.Is(r.err, dialer.ErrLocalNotReady), "local was ready: %v", r.err)
	assert.Zero(t, rec.count(peer.addr()), "dialled a peer after local became ready")
	assert.Empty(t, peer.received())

	de := dialError(t, r.err)
	assert.Equal(t, dialer.RequireLocalWhenReady, de.Policy)
	assert.Equal(t, local, attemptAddrs(de), "the error names the local addresses")
	for _, a := range de.Attempts {
		assert.True(t, a.Local)
		assert.Equal(t, len(ceilings)+1, a.Tries, a.Addr)
		assert.True(t, errors.Is(a.Err, syscall.ECONNREFUSED), "%s: %v", a.Addr, a.Err)
		assert.Contains(t, r.err.Error(), a.Addr)
	}
	assert.Contains(t, r.err.Error(), "connection refused")
}

// Before LocalReady, a Dial waits the grace period — dialling nothing, so a
// half-started local server is not hammered — and then falls back to a peer.
func TestBeforeReadyFallsBackToPeersAfterGrace(t *testing.T) {
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	local := startServer(t, "local", "127.0.0.1:0", nil) // bound, but not ready
	ready := make(chan struct{})
	rec := newRecorder(nil)
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port(),
		Remote:          func() []string { return []string{peer.addr()} },
		LocalReady:      ready,
		LocalReadyGrace: 10 * time.Second,
		Clock:           clk,
		DialContext:     rec.DialContext,
	})
	done := goDial(context.Background(), d)

	require.NoError(t, clk.WaitAdvance(10*time.Second-time.Nanosecond, waitFor, 1))
	// Still inside the grace period: the grace timer is the one timer left.
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	pending(t, done)
	rec.quiet(t)
	require.NoError(t, clk.WaitAdvance(time.Nanosecond, waitFor, 1))

	r := result(t, done)
	require.NoError(t, r.err)
	defer r.conn.Close()
	assert.Equal(t, peer.addr(), r.route.Addr)
	assert.False(t, r.route.Local)
	assert.Equal(t, (<-chan struct{})(ready), r.route.LocalReady, "the route carries the ready signal to move on")
	assert.Equal(t, []string{peer.addr()}, rec.dialled(), "nothing but the peer is dialled before ready")
	reply, err := roundTrip(r.conn, "hello")
	require.NoError(t, err)
	assert.Equal(t, "peer hello", reply)
}

// LocalReady closing during the grace period dials local at once: the wait
// is driven by the channel, not by a poll or by the grace timer.
func TestReadyDuringGraceDialsLocalAtOnce(t *testing.T) {
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	local := startServer(t, "local", "127.0.0.1:0", nil)
	ready := make(chan struct{})
	rec := newRecorder(nil)
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port(),
		Remote:          func() []string { return []string{peer.addr()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Hour,
		Clock:           clk,
		DialContext:     rec.DialContext,
	})
	done := goDial(context.Background(), d)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // waiting on the grace timer
	rec.quiet(t)
	close(ready)

	r := result(t, done)
	require.NoError(t, r.err)
	defer r.conn.Close()
	assert.True(t, r.route.Local)
	assert.Equal(t, local.addr(), r.route.Addr)
	assert.Equal(t, t0, clk.Now(), "no time had to pass")
	assert.Zero(t, rec.count(peer.addr()))
	reply, err := roundTrip(r.conn, "hello")
	require.NoError(t, err)
	assert.Equal(t, "local hello", reply)
}

// LocalReady closing while the fallback round is dialling peers cancels
// that round and goes local; no peer is dialled after ready.
func TestReadyDuringFallbackCancelsPeerRoundAndGoesLocal(t *testing.T) {
	const peerA, peerB = "10.0.0.2:17070", "10.0.0.3:17070"
	var cs conns
	rec := newRecorder(func(ctx context.Context, _, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "10.") { // a peer that does not answer
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return cs.make(addr), nil
	})
	ready := make(chan struct{})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:       17070,
		Remote:          func() []string { return []string{peerA, peerB} },
		LocalReady:      ready,
		LocalReadyGrace: time.Second,
		HeadStart:       time.Second,
		Clock:           clk,
		DialContext:     rec.DialContext,
	})
	done := goDial(context.Background(), d)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // grace over
	first := rec.next(t)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // head start over
	second := rec.next(t)
	assert.ElementsMatch(t, []string{peerA, peerB}, []string{first, second})
	close(ready)

	r := result(t, done)
	require.NoError(t, r.err)
	assert.True(t, r.route.Local)
	assert.Equal(t, "127.0.0.1:17070", r.route.Addr)
	assert.Equal(t, []string{first, second, "127.0.0.1:17070"}, rec.dialled(), "no peer dial after ready")
}

// Every connection of a round but the winner's is closed before Dial
// returns, including those that connect after the winner.
func TestEveryConnectionButTheWinnerIsClosed(t *testing.T) {
	peers := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}
	var cs conns
	release := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, _, addr string) (net.Conn, error) {
		<-release // all connect together, and even after cancellation
		return cs.make(addr), nil
	})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		Policy:      dialer.PreferLocal,
		Remote:      func() []string { return peers },
		HeadStart:   time.Second,
		Clock:       clk,
		DialContext: rec.DialContext,
	})
	done := goDial(context.Background(), d)
	var started []string
	for i := range peers {
		started = append(started, rec.next(t))
		if i < len(peers)-1 {
			// The next attempt waits for the head start, and no longer.
			require.NoError(t, clk.WaitAdvance(time.Second-time.Nanosecond, waitFor, 1))
			require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
			rec.quiet(t)
			require.NoError(t, clk.WaitAdvance(time.Nanosecond, waitFor, 1))
		}
	}
	assert.ElementsMatch(t, peers, started, "staggered attempts reach every peer")
	close(release)

	r := result(t, done)
	require.NoError(t, r.err)
	made, closed := cs.closedCount()
	assert.Equal(t, len(peers), made)
	assert.Equal(t, len(peers)-1, closed, "every loser is closed when Dial returns")
	winner := r.conn.(*fakeConn)
	assert.Zero(t, winner.closed.Load(), "the winner is not closed")
	assert.Equal(t, winner.addr, r.route.Addr)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 0), "no timer left behind")
}

// Connect races any io.Closer and closes the losers the same way.
func TestConnectClosesLosingClients(t *testing.T) {
	type client struct {
		*fakeConn
		user string
	}
	var cs conns
	release := make(chan struct{})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		Policy:    dialer.PreferLocal,
		Remote:    func() []string { return []string{"a:1", "b:1", "c:1"} },
		HeadStart: time.Second,
		Clock:     clk,
	})
	opened := make(chan string, 3)
	type res struct {
		c   *client
		r   dialer.Route
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, r, err := dialer.Connect(context.Background(), d, func(ctx context.Context, addr string) (*client, error) {
			opened <- addr
			<-release
			return &client{fakeConn: cs.make(addr), user: "machine-1"}, nil
		})
		done <- res{c, r, err}
	}()
	for range 2 {
		<-opened
		require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1))
	}
	<-opened
	close(release)
	got := <-done
	require.NoError(t, got.err)
	assert.Equal(t, "machine-1", got.c.user)
	assert.Equal(t, got.c.addr, got.r.Addr)
	made, closed := cs.closedCount()
	assert.Equal(t, 3, made)
	assert.Equal(t, 2, closed)
	assert.Zero(t, got.c.closed.Load())
}

// Cancelling ctx while attempts are in flight returns ctx's error, closes
// a connection that completed during the cancellation, and leaves no
// goroutine or timer behind.
func TestCancelMidDialLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	var cs conns
	rec := newRecorder(func(ctx context.Context, _, addr string) (net.Conn, error) {
		<-ctx.Done()
		if addr == "late:1" { // connected just as the dial was cancelled
			return cs.make(addr), nil
		}
		return nil, ctx.Err()
	})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		Policy:      dialer.PreferLocal,
		Remote:      func() []string { return []string{"hang:1", "late:1"} },
		HeadStart:   time.Second,
		Clock:       clk,
		DialContext: rec.DialContext,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1))
	rec.next(t)
	cancel()

	r := result(t, done)
	require.Error(t, r.err)
	assert.Nil(t, r.conn)
	assert.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
	made, closed := cs.closedCount()
	assert.Equal(t, 1, made)
	assert.Equal(t, 1, closed, "the late connection was closed")
	de := dialError(t, r.err)
	assert.ElementsMatch(t, []string{"hang:1", "late:1"}, attemptAddrs(de))
	require.NoError(t, clk.WaitAdvance(0, waitFor, 0), "no timer left behind")
}

// Cancelling during the grace wait or a backoff pause returns at once.
func TestCancelWhileWaitingReturnsPromptly(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, stage := range []string{"grace", "backoff"} {
		t.Run(stage, func(t *testing.T) {
			clk := newClock()
			rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
				return nil, refused(addr)
			})
			cfg := dialer.Config{LocalPort: 17070, Clock: clk, DialContext: rec.DialContext, LocalReady: make(chan struct{})}
			if stage == "backoff" {
				cfg.Policy = dialer.RequireLocal
			}
			d := mustNew(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			done := goDial(ctx, d)
			require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
			cancel()
			r := result(t, done)
			assert.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
			assert.Equal(t, stage == "grace", errors.Is(r.err, dialer.ErrLocalNotReady), "%v", r.err)
			require.NoError(t, clk.WaitAdvance(0, waitFor, 0), "no timer left behind")
		})
	}
}

// A server's "try again later" (an error with RetryAfter) keeps its
// address alone for exactly that long instead of hammering it: no jitter
// on top (the server drew the hint; before the fix up to 20 % was added).
func TestRetryAfterIsHonoured(t *testing.T) {
	const hint = 10 * time.Second
	clk := newClock()
	var mu sync.Mutex
	dialledAt := map[string][]time.Time{}
	var cs conns
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		dialledAt[addr] = append(dialledAt[addr], clk.Now())
		if len(dialledAt[addr]) == 1 {
			return nil, busyError{hint}
		}
		return cs.make(addr), nil
	})
	d := mustNew(t, dialer.Config{
		LocalPort:   17070,
		Policy:      dialer.RequireLocal,
		Clock:       clk,
		DialContext: rec.DialContext,
		MinBackoff:  100 * time.Millisecond,
	})
	done := goDial(context.Background(), d)
	rec.next(t)
	rec.next(t)
	// The ordinary backoff (≤100 ms) passes, but both addresses are held off.
	require.NoError(t, clk.WaitAdvance(hint-time.Second, waitFor, 1))
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // parked until the hint expires
	rec.quiet(t)
	pending(t, done)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // to the hint, exactly

	r := result(t, done)
	require.NoError(t, r.err)
	assert.True(t, r.route.Local)
	mu.Lock()
	defer mu.Unlock()
	times := dialledAt[r.route.Addr]
	require.Len(t, times, 2)
	assert.Equal(t, hint, times[1].Sub(times[0]), "redialled exactly at the server's RetryAfter")
}

// The hint outlives one Dial: the next Dial skips the address too, and if
// ctx ends first its error names the address with the server's answer.
func TestRetryAfterIsSharedAcrossDials(t *testing.T) {
	clk := newClock()
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
		if addr == "busy:1" {
			return nil, busyError{time.Minute}
		}
		return nil, refused(addr)
	})
	d := mustNew(t, dialer.Config{
		Policy:      dialer.PreferLocal,
		Remote:      func() []string { return []string{"busy:1", "down:1"} },
		Clock:       clk,
		DialContext: rec.DialContext,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	rec.next(t)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	cancel()
	result(t, done)

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done = goDial(ctx, d)
	assert.Equal(t, "down:1", rec.next(t), "the busy server is left alone")
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	rec.quiet(t)
	cancel()
	r := result(t, done)
	de := dialError(t, r.err)
	require.Len(t, de.Attempts, 2)
	for _, a := range de.Attempts {
		if a.Addr == "busy:1" {
			assert.Zero(t, a.Tries)
			assert.True(t, errors.Is(a.Err, errBusy), "%v", a.Err)
		}
	}
	assert.Contains(t, r.err.Error(), "busy:1 (not dialled): server busy")
}

// Under PreferLocal a reachable local server wins before any peer is tried;
// a refusing one hands over to the peers at once.
func TestPreferLocalTriesLocalFirst(t *testing.T) {
	for _, localUp := range []bool{true, false} {
		name := map[bool]string{true: "local up", false: "local down"}[localUp]
		t.Run(name, func(t *testing.T) {
			peer := startServer(t, "peer", "127.0.0.1:0", nil)
			res := reserve(t)
			port := res.port
			if localUp {
				ln, err := res.listen()
				require.NoError(t, err)
				t.Cleanup(serve("local", ln, nil).stop)
			}
			rec := newRecorder(nil)
			d := mustNew(t, dialer.Config{
				LocalPort:   port,
				Policy:      dialer.PreferLocal,
				Remote:      func() []string { return []string{peer.addr()} },
				Clock:       newClock(), // never advanced: no head start has to expire
				DialContext: rec.DialContext,
			})
			conn, route, err := d.Dial(context.Background())
			require.NoError(t, err)
			defer conn.Close()
			if localUp {
				assert.True(t, route.Local)
				assert.Equal(t, localAddrs(port)[:1], rec.dialled())
			} else {
				assert.False(t, route.Local)
				assert.Equal(t, append(localAddrs(port), peer.addr()), rec.dialled())
			}
		})
	}
}

// Local addresses are the literal loopback IPs; a host without IPv6 (the
// [::1] dial fails) connects on 127.0.0.1, and a server on [::1] only is
// found too.
func TestHostWithoutIPv6StillConnects(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   string
	}{{"ipv4 only", "127.0.0.1:17070"}, {"ipv6 only", "[::1]:17070"}} {
		t.Run(tc.name, func(t *testing.T) {
			var cs conns
			rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
				switch addr {
				case tc.up:
					return cs.make(addr), nil
				case "[::1]:17070":
					return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EADDRNOTAVAIL}
				}
				return nil, refused(addr)
			})
			d := mustNew(t, dialer.Config{LocalPort: 17070, Policy: dialer.RequireLocal, Clock: newClock(), DialContext: rec.DialContext})
			_, route, err := d.Dial(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tc.up, route.Addr)
			assert.True(t, route.Local)
			for _, a := range rec.dialled() {
				assert.NotContains(t, a, "localhost")
			}
		})
	}
	// And for real: a server on 127.0.0.1 only.
	srv := startServer(t, "v4", "127.0.0.1:0", nil)
	d := mustNew(t, dialer.Config{LocalPort: srv.port(), Policy: dialer.RequireLocal})
	conn, route, err := d.Dial(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	assert.Equal(t, srv.addr(), route.Addr)
}

// Peer order is shuffled for every Dial, and Remote is read every time.
func TestPeerOrderIsShuffledPerDial(t *testing.T) {
	peers := []string{"a:1", "b:1", "c:1", "d:1", "e:1"}
	reads := 0
	var cs conns
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) { return cs.make(addr), nil })
	d := mustNew(t, dialer.Config{
		Policy:      dialer.PreferLocal,
		Remote:      func() []string { reads++; return peers },
		Clock:       newClock(),
		DialContext: rec.DialContext,
	})
	firsts := map[string]int{}
	const dials = 60
	for range dials {
		conn, route, err := d.Dial(context.Background())
		require.NoError(t, err)
		conn.Close()
		firsts[route.Addr]++
	}
	assert.Equal(t, dials, reads, "Remote is re-read on every dial")
	// With 5 peers the chance that 60 shuffles start alike is 5^-59.
	assert.Greater(t, len(firsts), 1, "the first peer is always the same: %v", firsts)
}

// A changed peer list takes effect at the next round of the same Dial.
func TestRemoteIsReadAgainEveryRound(t *testing.T) {
	var mu sync.Mutex
	list := []string{"old:1"}
	var cs conns
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
		if addr == "old:1" {
			return nil, refused(addr)
		}
		return cs.make(addr), nil
	})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		Policy:      dialer.PreferLocal,
		Remote:      func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(list) },
		Clock:       clk,
		DialContext: rec.DialContext,
	})
	done := goDial(context.Background(), d)
	assert.Equal(t, "old:1", rec.next(t))
	mu.Lock()
	list = []string{"new:1"}
	mu.Unlock()
	require.NoError(t, clk.WaitAdvance(50*time.Millisecond, waitFor, 1))
	r := result(t, done)
	require.NoError(t, r.err)
	assert.Equal(t, "new:1", r.route.Addr)
	assert.Nil(t, r.route.LocalReady, "no local controller: nothing to move to")
}

// A controller that never becomes ready and has no peer to fall back to
// keeps waiting for its own server (no polling, no dials) until ctx ends;
// the error then matches ErrLocalNotReady as well as ctx's error.
func TestErrLocalNotReadyWhenNeverReadyAndNoPeers(t *testing.T) {
	clk := newClock()
	rec := newRecorder(nil)
	d := mustNew(t, dialer.Config{
		LocalPort:       17070,
		LocalReadyGrace: time.Second,
		Clock:           clk,
		DialContext:     rec.DialContext,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // grace
	for range 5 {
		require.NoError(t, clk.WaitAdvance(5*time.Second, waitFor, 1)) // backoff, re-reading Remote
	}
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	cancel()
	r := result(t, done)
	assert.True(t, errors.Is(r.err, dialer.ErrLocalNotReady), "%v", r.err)
	assert.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
	assert.Empty(t, rec.dialled())
	assert.Empty(t, dialError(t, r.err).Attempts)
	assert.Equal(t, "dialer: dialing controller (require-local-when-ready): context canceled; local controller not ready; no address to dial", r.err.Error())
}

// The error names every address with its own failure, and wraps the
// deadline.
func TestDialErrorNamesEveryAddress(t *testing.T) {
	port := reservePort(t)
	peerA, peerB := localAddrs(reservePort(t))[0], localAddrs(reservePort(t))[0]
	d := mustNew(t, dialer.Config{
		LocalPort:  port,
		Policy:     dialer.PreferLocal,
		Remote:     func() []string { return []string{peerA, peerB} },
		MinBackoff: time.Millisecond,
		MaxBackoff: 5 * time.Millisecond,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	conn, _, err := d.Dial(ctx)
	require.Error(t, err)
	assert.Nil(t, conn)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	de := dialError(t, err)
	assert.ElementsMatch(t, append(localAddrs(port), peerA, peerB), attemptAddrs(de))
	for _, a := range de.Attempts {
		assert.Equal(t, slices.Contains(localAddrs(port), a.Addr), a.Local, a.Addr)
		assert.GreaterOrEqual(t, a.Tries, 1, a.Addr)
		// The deadline may cut short an address's only try; any earlier
		// refusal is kept rather than masked by the deadline.
		if a.Tries > 1 || !errors.Is(a.Err, context.DeadlineExceeded) {
			assert.True(t, errors.Is(a.Err, syscall.ECONNREFUSED), "%s (%d tries): %v", a.Addr, a.Tries, a.Err)
		}
		assert.Contains(t, err.Error(), a.Addr)
	}
	assert.True(t, strings.HasPrefix(err.Error(), "dialer: dialing controller (prefer-local): context deadline exceeded; tried "), err.Error())
}

func TestConnectRejectsNilArguments(t *testing.T) {
	d := mustNew(t, dialer.Config{LocalPort: 1})
	_, _, err := dialer.Connect[net.Conn](context.Background(), nil, func(context.Context, string) (net.Conn, error) { return nil, nil })
	assert.ErrorContains(t, err, "nil Dialer")
	_, _, err = dialer.Connect[net.Conn](context.Background(), d, nil)
	assert.ErrorContains(t, err, "nil open func")
	_, _, err = new(dialer.Dialer).Dial(context.Background())
	assert.ErrorContains(t, err, "Dialer not made by New")
	assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)
	_, _, err = dialer.Connect[net.Conn](context.Background(), d, nil)
	assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)
}

// An open func that returns neither a client nor an error is a failure of
// that address, not a nil winner.
func TestNilConnWithoutErrorIsAFailure(t *testing.T) {
	clk := newClock()
	rec := newRecorder(func(context.Context, string, string) (net.Conn, error) { return nil, nil })
	d := mustNew(t, dialer.Config{LocalPort: 1, Policy: dialer.RequireLocal, Clock: clk, DialContext: rec.DialContext})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	rec.next(t)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	cancel()
	r := result(t, done)
	assert.ErrorContains(t, r.err, "open returned neither a connection nor an error")
}

// Many goroutines may share one Dialer.
func TestConcurrentDials(t *testing.T) {
	srv := startServer(t, "local", "127.0.0.1:0", nil)
	ready := make(chan struct{})
	close(ready)
	d := mustNew(t, dialer.Config{LocalPort: srv.port(), LocalReady: ready})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			conn, route, err := d.Dial(context.Background())
			if err == nil {
				if !route.Local {
					err = errors.New("not local")
				}
				conn.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

// An absurd hint holds the address off (it does not overflow into the past).
func TestHugeRetryAfterHoldsOff(t *testing.T) {
	clk := newClock()
	rec := newRecorder(func(context.Context, string, string) (net.Conn, error) {
		return nil, busyError{1<<63 - 1}
	})
	d := mustNew(t, dialer.Config{Policy: dialer.PreferLocal, Remote: func() []string { return []string{"busy:1"} },
		Clock: clk, DialContext: rec.DialContext, MinBackoff: time.Second, MaxBackoff: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1))  // the backoff pause
	require.NoError(t, clk.WaitAdvance(24*time.Hour, waitFor, 1)) // now parked on the hint
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	rec.quiet(t)
	cancel()
	r := result(t, done)
	de := dialError(t, r.err)
	require.Len(t, de.Attempts, 1)
	assert.Equal(t, 1, de.Attempts[0].Tries)
}

// An attempt that merely saw ctx ending (a net.Dialer reports "i/o
// timeout" at the deadline, sometimes just before ctx.Err() is set) does
// not mask the address's real failure in the error.
func TestDialErrorKeepsRealFailureOverCtxEnding(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	calls := 0
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 1 {
			return nil, refused(addr)
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	})
	d := mustNew(t, dialer.Config{Policy: dialer.PreferLocal, Remote: func() []string { return []string{"peer:1"} },
		Clock: clk, DialContext: rec.DialContext, MinBackoff: time.Second, MaxBackoff: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1))
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1))
	cancel()
	de := dialError(t, result(t, done).err)
	require.Len(t, de.Attempts, 1)
	assert.Equal(t, 2, de.Attempts[0].Tries)
	assert.True(t, errors.Is(de.Attempts[0].Err, syscall.ECONNREFUSED), "%v", de.Attempts[0].Err)
}

// Under PreferLocal, LocalReady closing cuts a backoff pause short.
func TestPreferLocalRetriesAtOnceWhenLocalBecomesReady(t *testing.T) {
	ready := make(chan struct{})
	var cs conns
	rec := newRecorder(func(_ context.Context, _, addr string) (net.Conn, error) {
		select {
		case <-ready:
			return cs.make(addr), nil
		default:
			return nil, refused(addr)
		}
	})
	clk := newClock()
	d := mustNew(t, dialer.Config{LocalPort: 17070, Policy: dialer.PreferLocal, LocalReady: ready,
		Clock: clk, DialContext: rec.DialContext, MinBackoff: time.Hour, MaxBackoff: time.Hour})
	done := goDial(context.Background(), d)
	rec.next(t)
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // in a one-hour pause
	close(ready)
	r := result(t, done)
	require.NoError(t, r.err)
	assert.True(t, r.route.Local)
	assert.Equal(t, t0, clk.Now())
}

// resetHookClock is a testclock whose timers call onReset before every
// Reset, so that a test can act at the moment a round re-arms its head
// start: between deciding to start the next attempt and starting it.
type resetHookClock struct {
	*testclock.Clock
	onReset func()
}

func (c *resetHookClock) NewTimer(d time.Duration) clock.Timer {
	return &resetHookTimer{Timer: c.Clock.NewTimer(d), onReset: c.onReset}
}

type resetHookTimer struct {
	clock.Timer
	onReset func()
}

func (t *resetHookTimer) Reset(d time.Duration) bool {
	t.onReset()
	return t.Timer.Reset(d)
}

// LocalReady may close while a fallback round is between two attempts: a
// peer has just failed and the round is starting the next. That attempt
// must not start — once ready, no peer is dialled, not even the one the
// round had already picked. (The round's select picks at random among
// ready cases, so without a last check the guarantee would be only likely.)
func TestNoPeerAttemptStartsOnceReadyHasClosed(t *testing.T) {
	ready := make(chan struct{})
	var mu sync.Mutex
	peerDials := 0
	var afterReady []string
	rec := newRecorder(func(ctx context.Context, _, addr string) (net.Conn, error) {
		if addr == "127.0.0.1:17070" {
			return &fakeConn{addr: addr}, nil
		}
		mu.Lock()
		peerDials++
		n := peerDials
		select {
		case <-ready:
			afterReady = append(afterReady, addr)
		default:
		}
		mu.Unlock()
		if n == 1 { // the first peer never answers: the round stays open
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, refused(addr) // the second fails at once
	})
	resets := 0
	clk := &resetHookClock{Clock: newClock(), onReset: func() {
		// 1st Reset: the head start expired and the second peer starts.
		// 2nd Reset: it failed and the round moves on to the third peer (a
		// fourth remains, so the head start is re-armed) — this is when the
		// local server becomes ready.
		if resets++; resets == 2 {
			close(ready)
		}
	}}
	d := mustNew(t, dialer.Config{
		LocalPort:       17070,
		Remote:          func() []string { return []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"} },
		LocalReady:      ready,
		LocalReadyGrace: time.Second,
		HeadStart:       time.Hour,
		Clock:           clk,
		DialContext:     rec.DialContext,
	})
	done := goDial(context.Background(), d)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // grace over: fall back
	rec.next(t)
	require.NoError(t, clk.WaitAdvance(time.Hour, waitFor, 1)) // head start over
	r := result(t, done)
	require.NoError(t, r.err)
	assert.True(t, r.route.Local)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, afterReady, "peers dialled after LocalReady closed")
	assert.Equal(t, 2, peerDials)
}

// nilDerefClient panics if Close is called on a nil pointer, as most
// client types would.
type nilDerefClient struct{ conn *fakeConn }

func (c *nilDerefClient) Close() error { return c.conn.Close() }

// An open func that returns a typed nil (a nil *T, no error) failed: it
// neither wins the round nor has Close called on it. A value returned
// beside an error is closed, like every other loser.
func TestConnectTreatsATypedNilAsAFailure(t *testing.T) {
	clk := newClock()
	var cs conns
	d := mustNew(t, dialer.Config{LocalPort: 17070, Policy: dialer.RequireLocal, Clock: clk})
	c, route, err := dialer.Connect(context.Background(), d, func(_ context.Context, addr string) (*nilDerefClient, error) {
		switch addr {
		case "127.0.0.1:17070":
			return nil, nil
		default:
			return &nilDerefClient{conn: cs.make(addr)}, nil
		}
	})
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Equal(t, "[::1]:17070", route.Addr)

	var sloppy conns
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opened := make(chan struct{}, 2)
	go func() {
		_, _, err := dialer.Connect(ctx, d, func(_ context.Context, addr string) (*nilDerefClient, error) {
			opened <- struct{}{}
			return &nilDerefClient{conn: sloppy.make(addr)}, refused(addr)
		})
		done <- err
	}()
	// Both addresses dialled: the head-start timer, armed while the first
	// was alone, has been stopped, so the one timer left to wait for is
	// the backoff after the round.
	for range 2 {
		select {
		case <-opened:
		case <-time.After(waitFor):
			t.Fatal("both addresses were not dialled")
		}
	}
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // both failed; in backoff
	cancel()
	err = <-done
	assert.ErrorContains(t, err, "[::1]:17070")
	made, closed := sloppy.closedCount()
	assert.Equal(t, 2, made)
	assert.Equal(t, 2, closed, "values returned beside an error are closed")
}

// In an interface T a nil pointer is not == nil. Returned beside an error
// ("return tls.Dial(...)" into a net.Conn, the usual way), it is left
// alone, never closed: its Close would panic on the nil receiver.
func TestConnectLeavesANilPointerInAnInterfaceBesideAnErrorAlone(t *testing.T) {
	clk := newClock()
	d := mustNew(t, dialer.Config{LocalPort: 17070, Policy: dialer.RequireLocal, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opened := make(chan struct{}, 2)
	go func() {
		_, _, err := dialer.Connect(ctx, d, func(_ context.Context, addr string) (io.Closer, error) {
			opened <- struct{}{}
			var c *nilDerefClient
			return c, refused(addr)
		})
		done <- err
	}()
	for range 2 {
		select {
		case <-opened:
		case <-time.After(waitFor):
			t.Fatal("both addresses were not dialled")
		}
	}
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // both failed; in backoff
	cancel()
	err := <-done
	assert.ErrorContains(t, err, "127.0.0.1:17070")
	assert.ErrorContains(t, err, "[::1]:17070")
}
