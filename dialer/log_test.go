package dialer_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

const msgRoute = "route chosen"

func dialOK(t *testing.T, d *dialer.Dialer) dialer.Route {
	t.Helper()
	r := result(t, goDial(context.Background(), d))
	require.NoError(t, r.err)
	require.NoError(t, r.conn.Close())
	return r.route
}

// TestRouteIsLoggedWhenItChanges: the dialer's one decision that matters
// (local, or a peer and why) is one record per change, not per call; the
// calls are counts, in Report only.
func TestRouteIsLoggedWhenItChanges(t *testing.T) {
	for _, logged := range []bool{true, false} {
		t.Run(map[bool]string{true: "logger", false: "no logger"}[logged], func(t *testing.T) {
			h := logtest.New()
			peer := startServer(t, "peer", "127.0.0.1:0", nil)
			local := startServer(t, "local", "127.0.0.1:0", nil) // bound, not ready
			ready := make(chan struct{})
			clk := newClock()
			cfg := dialer.Config{
				LocalPort:       local.port(),
				Remote:          func() []string { return []string{peer.addr()} },
				LocalReady:      ready,
				LocalReadyGrace: time.Second,
				Clock:           clk,
			}
			if logged {
				cfg.Logger = h.Logger()
			}
			d := mustNew(t, cfg)
			for range 2 {
				done := goDial(context.Background(), d)
				require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1)) // the grace period's timer, and no other
				r := result(t, done)
				require.NoError(t, r.err)
				require.NoError(t, r.conn.Close())
				assert.False(t, r.route.Local)
			}
			close(ready)
			for range 2 {
				assert.True(t, dialOK(t, d).Local)
			}
			assert.Equal(t, dialer.Report{LocalReady: true, LocalDials: 2, PeerDials: 2, Fallbacks: 2}, d.Report())
			if !logged {
				assert.Empty(t, h.Records())
				return
			}

			recs := h.Records()
			require.Len(t, recs, 2, "one record per route change: %v", recs)
			assert.Equal(t, slog.LevelInfo, recs[0].Level)
			assert.Equal(t, msgRoute, recs[0].Message)
			assert.Equal(t, "peer", recs[0].Str("route"))
			assert.Equal(t, peer.addr(), recs[0].Str("addr"))
			assert.Equal(t, "dialer: local controller not ready within LocalReadyGrace 1s", recs[0].Str("err"))
			assert.ErrorIs(t, recs[0].Attrs["err"].Any().(error), dialer.ErrLocalNotReady)
			assert.Len(t, recs[0].Attrs, 3)
			assert.Equal(t, msgRoute, recs[1].Message)
			assert.Equal(t, "local", recs[1].Str("route"))
			assert.Equal(t, local.addr(), recs[1].Str("addr"))
			assert.Len(t, recs[1].Attrs, 2, "no err: local is the route wanted")
		})
	}
}

// TestPreferLocalFallbackSaysWhy: the route record names the local
// failure that sent the call to a peer.
func TestPreferLocalFallbackSaysWhy(t *testing.T) {
	h := logtest.New()
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	port := reservePort(t) // nothing listens: refused
	d := mustNew(t, dialer.Config{
		LocalPort: port, Policy: dialer.PreferLocal,
		Remote: func() []string { return []string{peer.addr()} },
		Clock:  newClock(), Logger: h.Logger(),
	})
	assert.False(t, dialOK(t, d).Local)
	recs := h.Matching(msgRoute)
	require.Len(t, recs, 1)
	assert.Equal(t, "peer", recs[0].Str("route"))
	assert.True(t, strings.HasPrefix(recs[0].Str("err"), "local controller: "), recs[0].Str("err"))
	assert.Equal(t, dialer.Report{PeerDials: 1, Fallbacks: 1}, d.Report())
}

// TestPreferLocalFallbackToASlowLocalSaysSo: a local controller that does
// not answer is not "context canceled" (its attempts are cut short when
// the peer wins), but too slow.
func TestPreferLocalFallbackToASlowLocalSaysSo(t *testing.T) {
	h := logtest.New()
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	clk := newClock()
	const port = 17071
	d := mustNew(t, dialer.Config{
		LocalPort: port, Policy: dialer.PreferLocal,
		Remote: func() []string { return []string{peer.addr()} },
		Clock:  clk, Logger: h.Logger(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != peer.addr() {
				<-ctx.Done() // the local controller never answers
				return nil, ctx.Err()
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	done := goDial(context.Background(), d)
	require.NoError(t, clk.WaitAdvance(250*time.Millisecond, waitFor, 1)) // 127.0.0.1's head start
	require.NoError(t, clk.WaitAdvance(250*time.Millisecond, waitFor, 1)) // [::1]'s
	r := result(t, done)
	require.NoError(t, r.err)
	require.NoError(t, r.conn.Close())
	assert.Equal(t, peer.addr(), r.route.Addr)
	recs := h.Matching(msgRoute)
	require.Len(t, recs, 1)
	assert.Equal(t, "local controller did not answer within HeadStart 250ms", recs[0].Str("err"))
}

// TestPeersOnlyIsNoFallback: a machine without a controller dials peers
// as its route: no fallback, and no "why" to give.
func TestPeersOnlyIsNoFallback(t *testing.T) {
	h := logtest.New()
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	d := mustNew(t, dialer.Config{
		Policy: dialer.PreferLocal,
		Remote: func() []string { return []string{peer.addr()} },
		Clock:  newClock(), Logger: h.Logger(),
	})
	dialOK(t, d)
	dialOK(t, d)
	recs := h.Records()
	require.Len(t, recs, 1, "%v", recs)
	assert.Equal(t, msgRoute, recs[0].Message)
	assert.Equal(t, "peer", recs[0].Str("route"))
	assert.Len(t, recs[0].Attrs, 2)
	assert.Equal(t, dialer.Report{PeerDials: 2}, d.Report())
}

type cancelKey struct{}

// drainAlarms empties clk's notification of armed timers, which panics
// once 10,000 are pending (each dial arms one or two).
func drainAlarms(clk *testclock.Clock) {
	for {
		select {
		case <-clk.Alarms():
		default:
			return
		}
	}
}

// TestThousandsOfDialsMakeOneRecord: 3,000 local dials and 3,000 dials
// refused until their ctx ends are counted exactly, in Report, and the log
// has one record: the route. A call whose ctx ends (its owner cancelled
// it) is not a warning.
func TestThousandsOfDialsMakeOneRecord(t *testing.T) {
	const n = 3000
	h := logtest.New()
	clk := newClock()
	ready := make(chan struct{})
	close(ready)
	local := startServer(t, "local", "127.0.0.1:0", nil)
	d := mustNew(t, dialer.Config{
		LocalPort: local.port(), LocalReady: ready, Clock: clk, Logger: h.Logger(),
	})
	for range n {
		dialOK(t, d)
		drainAlarms(clk)
	}

	// The same policy with nothing listening: every attempt is refused,
	// and the call fails when its ctx ends, cancelled here after the
	// second local address (a real failure each time, and no clock to
	// advance for the backoff).
	port := reservePort(t)
	refusing := mustNew(t, dialer.Config{
		LocalPort: port, LocalReady: ready, Clock: clk, Logger: h.Logger(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if addr == localAddrs(port)[1] {
				ctx.Value(cancelKey{}).(context.CancelFunc)()
			}
			return c, err
		},
	})
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		_, _, err := refusing.Dial(context.WithValue(ctx, cancelKey{}, cancel))
		cancel()
		require.ErrorIs(t, err, context.Canceled)
		drainAlarms(clk)
	}
	assert.Equal(t, dialer.Report{LocalReady: true, LocalDials: n}, d.Report())
	assert.Equal(t, dialer.Report{LocalReady: true, Failures: n}, refusing.Report())

	clk.Advance(time.Hour) // no timer of the dialers' is armed: nothing fires
	recs := h.Records()
	require.Len(t, recs, 1, "%v", recs)
	assert.Equal(t, msgRoute, recs[0].Message)
	assert.Equal(t, "local", recs[0].Str("route"))
}

// The records use the library's keys only.
func TestLogKeys(t *testing.T) {
	allowed := map[string]bool{"route": true, "addr": true, "err": true}
	h := logtest.New()
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	d := mustNew(t, dialer.Config{
		LocalPort: reservePort(t), Policy: dialer.PreferLocal,
		Remote: func() []string { return []string{peer.addr()} },
		Clock:  newClock(), Logger: h.Logger(),
	})
	dialOK(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := d.Dial(ctx)
	require.True(t, errors.Is(err, context.Canceled))
	require.Len(t, h.Records(), 1)
	for _, r := range h.Records() {
		for k := range r.Attrs {
			assert.True(t, allowed[k], "key %q in %v", k, r)
		}
	}
}
