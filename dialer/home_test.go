package dialer_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

const (
	homePort = 17071
	homePeer = "192.0.2.1:17070"
)

// switchable answers every peer dial, and local dials only while up.
type switchable struct{ up atomic.Bool }

func (s *switchable) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	if addr != homePeer && !s.up.Load() {
		return nil, refused(addr)
	}
	c, srv := net.Pipe()
	_ = srv.Close()
	return c, nil
}

func isHome(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestHomeClosesAtTheFirstLocalDialAfterLocalReady: Home closes only once
// LocalReady has closed AND a call has connected locally: not at a peer
// dial, before or after ready; not at a local dial before ready; not at a
// local dial that failed.
func TestHomeClosesAtTheFirstLocalDialAfterLocalReady(t *testing.T) {
	sw := &switchable{}
	ready := make(chan struct{})
	d := mustNew(t, dialer.Config{
		LocalPort: homePort, Policy: dialer.PreferLocal, LocalReady: ready,
		Remote: func() []string { return []string{homePeer} }, Clock: newClock(),
		DialContext: sw.DialContext,
	})
	require.NotNil(t, d.Completed())
	dial := func() dialer.Route {
		t.Helper()
		r := dialOK(t, d)
		return r
	}

	assert.False(t, dial().Local, "local is down: a peer")
	assert.False(t, isHome(d.Completed()), "a peer dial is not home")

	sw.up.Store(true)
	assert.True(t, dial().Local)
	assert.False(t, isHome(d.Completed()), "a local dial before LocalReady is not the move home")

	sw.up.Store(false)
	close(ready)
	assert.False(t, dial().Local, "PreferLocal falls back to the peer")
	assert.False(t, isHome(d.Completed()), "a peer dial after LocalReady is not home")

	sw.up.Store(true)
	assert.True(t, dial().Local)
	assert.True(t, isHome(d.Completed()), "the first local dial after LocalReady is")
	assert.Equal(t, dialer.Report{LocalReady: true, LocalDials: 2, PeerDials: 2, Fallbacks: 2}, d.Report())
}

// Under RequireLocalWhenReady a local dial that fails until ctx ends does
// not close Home; the next that connects does.
func TestHomeWaitsForALocalDialThatConnects(t *testing.T) {
	sw := &switchable{}
	ready := make(chan struct{})
	close(ready)
	d := mustNew(t, dialer.Config{LocalPort: homePort, LocalReady: ready, Clock: newClock(), DialContext: sw.DialContext})
	ctx, cancel := context.WithCancel(context.Background())
	done := goDial(ctx, d)
	cancel()
	require.Error(t, result(t, done).err)
	assert.False(t, isHome(d.Completed()), "no local dial connected")
	sw.up.Store(true)
	assert.True(t, dialOK(t, d).Local)
	assert.True(t, isHome(d.Completed()))
}

// Concurrent calls that all connect locally close Home once (no double
// close, race-clean under -race).
func TestHomeUnderConcurrentDials(t *testing.T) {
	sw := &switchable{}
	sw.up.Store(true)
	ready := make(chan struct{})
	d := mustNew(t, dialer.Config{LocalPort: homePort, LocalReady: ready, Clock: newClock(), DialContext: sw.DialContext})
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			c, r, err := d.Dial(context.Background())
			if assert.NoError(t, err) {
				assert.True(t, r.Local)
				_ = c.Close()
			}
		})
	}
	close(ready)
	close(start)
	wg.Wait()
	assert.True(t, isHome(d.Completed()))
}

// A machine without a controller has no home: Completed is nil, as
// LocalReady is.
func TestHomeIsNilWithoutALocalController(t *testing.T) {
	d := mustNew(t, dialer.Config{Policy: dialer.PreferLocal, Remote: func() []string { return []string{homePeer} }})
	assert.Nil(t, d.Completed())
}

// The Dialer's Completed closes at the Transport's first local connection
// after LocalReady: a "self-dial" gate waits on it, no ping needed. A
// request served by a peer does not close it.
func TestTransportHome(t *testing.T) {
	peerLn := listenLoopback(t)
	startHTTP(t, "peer", peerLn)
	local := reserve(t)
	ready := make(chan struct{})
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Millisecond,
	})
	tr, err := dialer.NewTransport(d, nil)
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	assert.Equal(t, "peer", getBody(t, client, "http://controller/who"))
	assert.False(t, isHome(d.Completed()), "a request served by a peer")

	ln, err := local.listen()
	require.NoError(t, err)
	startHTTP(t, "local", ln)
	close(ready)
	assert.Equal(t, "local", getBody(t, client, "http://controller/who"))
	assert.True(t, isHome(d.Completed()))
}

// TestNothingIsLoggedAfterTheCallsReturn: a Dialer has no Close because it
// has nothing to flush: once its calls have returned it logs nothing more,
// however much time passes (before, a timer logged the calls' counts up to
// 10 s later, and a call whose ctx its owner cancelled as a warning). The
// bubble makes "nothing more" observable: synctest.Wait returns once every
// goroutine the Dialer might have started is blocked or gone.
func TestNothingIsLoggedAfterTheCallsReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := logtest.New()
		clk := newClock()
		sw := &switchable{}
		sw.up.Store(true)
		ready := make(chan struct{})
		close(ready)
		d := mustNew(t, dialer.Config{LocalPort: homePort, LocalReady: ready, Clock: clk, Logger: h.Logger(), DialContext: sw.DialContext})
		c, r, err := d.Dial(context.Background())
		require.NoError(t, err)
		require.True(t, r.Local)
		require.NoError(t, c.Close())
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the owner's ordinary cancellation
		_, _, err = d.Dial(ctx)
		require.ErrorIs(t, err, context.Canceled)

		h.Seal(t)
		clk.Advance(time.Hour)
		synctest.Wait()
		recs := h.Records()
		require.Len(t, recs, 1, "%v", recs)
		assert.Equal(t, msgRoute, recs[0].Message)
		for _, r := range recs {
			assert.Less(t, r.Level, slog.LevelWarn, "%v", r)
		}
		assert.Equal(t, dialer.Report{LocalReady: true, LocalDials: 1, Failures: 1}, d.Report())
	})
}
