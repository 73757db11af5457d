package listener_test

import (
	"errors"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/listener"
)

// transitions are the only messages the listener logs: connections are
// counted in Report, never logged.
var transitions = map[string]bool{
	"port bound": true, "port opened": true, "port closed": true,
	"port failed to open": true, "accept failed": true,
}

// assertOnlyTransitions checks that every record is a port transition.
func assertOnlyTransitions(t *testing.T, recs []logtest.Record) {
	t.Helper()
	for _, r := range recs {
		assert.True(t, transitions[r.Message], "not a transition: %v", r)
	}
}

// assertTransition checks one record of a port's transition: its level,
// message and exactly the keys port and addr (and err when wantErr).
func assertTransition(t *testing.T, r logtest.Record, level slog.Level, msg string, p listener.Port, addr string, wantErr bool) {
	t.Helper()
	assert.Equal(t, level, r.Level, "%v", r)
	assert.Equal(t, msg, r.Message, "%v", r)
	assert.Equal(t, p.String(), r.Str("port"), "%v", r)
	assert.Equal(t, addr, r.Str("addr"), "%v", r)
	keys := 2
	if wantErr {
		keys = 3
		assert.NotEmpty(t, r.Str("err"), "%v", r)
	}
	assert.Len(t, r.Attrs, keys, "%v", r)
}

func TestLogsEachPortTransition(t *testing.T) {
	h := logtest.New()
	l := newListener(t, listener.Config{Logger: h.Logger()})
	ctrl := l.Addr().String()
	recs := h.Records()
	require.Len(t, recs, 2, "%v", recs)
	assertTransition(t, recs[0], slog.LevelInfo, "port bound", listener.Controller, ctrl, false)
	assertTransition(t, recs[1], slog.LevelInfo, "port opened", listener.Controller, ctrl, false)

	require.NoError(t, l.OpenAPI())
	api := l.APIAddr().String()
	require.NoError(t, l.OpenAPI()) // already open: nothing happens, nothing is logged
	require.NoError(t, l.CloseAPI())
	require.NoError(t, l.Close())
	recs = h.Records()
	require.Len(t, recs, 6, "%v", recs)
	assertTransition(t, recs[2], slog.LevelInfo, "port bound", listener.API, api, false)
	assertTransition(t, recs[3], slog.LevelInfo, "port opened", listener.API, api, false)
	assertTransition(t, recs[4], slog.LevelInfo, "port closed", listener.API, api, false)
	assertTransition(t, recs[5], slog.LevelInfo, "port closed", listener.Controller, ctrl, false)
}

func TestLogsAnEarlyBoundAPIPortClosedByClose(t *testing.T) {
	h := logtest.New()
	l := newListener(t, listener.Config{Logger: h.Logger(), BindAPIEarly: true})
	api := l.APIAddr().String()
	require.NoError(t, l.Close())
	recs := h.Records()
	require.Len(t, recs, 5, "%v", recs)
	assertTransition(t, recs[1], slog.LevelInfo, "port bound", listener.API, api, false)
	assertTransition(t, recs[3], slog.LevelInfo, "port closed", listener.API, api, false)
}

// TestLogsTheAPIPortFailingToOpen: with OpenAPIWhen no caller sees the
// bind error, so it must be in the log, not only on Failed.
func TestLogsTheAPIPortFailingToOpen(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer squatter.Close()
	addr := squatter.Addr().String()
	h := logtest.New()
	stable := make(chan struct{})
	l := newListener(t, listener.Config{Logger: h.Logger(), APIAddr: addr})
	require.NoError(t, l.OpenAPIWhen("stable", stable))
	close(stable)
	select {
	case <-l.Failed():
	case <-time.After(guard):
		t.Fatal("Failed did not close")
	}
	recs := h.Matching("port failed to open")
	require.Len(t, recs, 1)
	assertTransition(t, recs[0], slog.LevelError, "port failed to open", listener.API, addr, true)
	err = recs[0].Attrs["err"].Any().(error)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.ErrorIs(t, err, listener.ErrBind)
}

func TestLogsAPermanentAcceptFailure(t *testing.T) {
	h := logtest.New()
	fake := newFake(1)
	l, err := listener.NewWithListen(loopback(listener.Config{Logger: h.Logger()}), (&listenSeq{fakes: []net.Listener{fake}}).listen)
	require.NoError(t, err)
	defer l.Close()
	boom := errors.New("boom: bad file descriptor")
	fake.give(t, nil, boom)
	_, err = l.Accept()
	require.ErrorIs(t, err, listener.ErrAcceptFailed)
	recs := h.Matching("accept failed")
	require.Len(t, recs, 1)
	assertTransition(t, recs[0], slog.LevelError, "accept failed", listener.Controller, fake.addr.String(), true)
	assert.Equal(t, boom, recs[0].Attrs["err"].Any())
}

// TestThousandsOfRateLimitedAcceptsAreCountedNotLogged: 3,000 agents
// through a rate-limited API port are counted exactly in Report, and the
// log has the ports' transitions only, during the run and after Close.
func TestThousandsOfRateLimitedAcceptsAreCountedNotLogged(t *testing.T) {
	const n = 3000
	h := logtest.New()
	clk := testclock.NewClock(t0)
	// 1000/s: the burst is 2, and each later conn waits exactly 1 ms.
	l := newListener(t, listener.Config{Logger: h.Logger(), Clock: clk, APIRate: 1000})
	require.NoError(t, l.OpenAPI())
	api := l.APIAddr().String()
	for i := range n {
		c, err := net.DialTimeout("tcp", api, guard)
		require.NoError(t, err)
		accepted := acceptAsync(l)
		if i >= 2 {
			waitAlarm(t, clk) // the rate limit's wait
			clk.Advance(time.Millisecond)
		}
		s, err := receive(t, accepted)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, c.Close())
	}
	rep := l.Report().API
	assert.EqualValues(t, n, rep.Accepted)
	assert.EqualValues(t, n-2, rep.RateLimited)
	assert.Zero(t, rep.Refused)
	assert.Equal(t, (n-2)*time.Millisecond, rep.Throttled)
	clk.Advance(time.Hour) // no timer of the listener's is armed: nothing fires
	assert.Len(t, h.Records(), 2+2, "bound and opened for each port, nothing else")
	require.NoError(t, l.Close())
	h.Seal(t)
	recs := h.Records()
	assert.Len(t, recs, 2+2+2, "and closed for each port")
	assertOnlyTransitions(t, recs)
}

// TestRefusedConnsAreCounted: a connection the listener holds (for the
// rate limit, or for an Accept) when the API port closes is closed
// unserved and counted as refused, with or without a logger, and logged
// by neither.
func TestRefusedConnsAreCounted(t *testing.T) {
	for _, logged := range []bool{false, true} {
		t.Run(map[bool]string{false: "no logger", true: "logger"}[logged], func(t *testing.T) {
			h := logtest.New()
			clk := testclock.NewClock(t0)
			cfg := listener.Config{Clock: clk, APIRate: 10} // burst 1, then 100 ms a conn
			if logged {
				cfg.Logger = h.Logger()
			}
			api := newFake(2)
			l, err := listener.NewWithListen(loopback(cfg), (&listenSeq{fakes: []net.Listener{nil, api}}).listen)
			require.NoError(t, err)
			defer l.Close()

			// Held for Accept: nobody calls it, and CloseAPI ends the port.
			require.NoError(t, l.OpenAPI())
			held := api.givePipe(t)
			require.NoError(t, l.CloseAPI())
			assertClosedByPeer(t, held)

			// Held for the rate limit: the first conn takes the burst, the
			// second waits for a token when the port closes.
			api2 := newFake(3)
			l2, err := listener.NewWithListen(loopback(cfg), (&listenSeq{fakes: []net.Listener{nil, api2}}).listen)
			require.NoError(t, err)
			defer l2.Close()
			require.NoError(t, l2.OpenAPI())
			api2.givePipe(t)
			mustAccept(t, l2, listener.API)
			waiting := api2.givePipe(t)
			waitAlarm(t, clk)
			require.NoError(t, l2.CloseAPI())
			assertClosedByPeer(t, waiting)

			rep, rep2 := l.Report().API, l2.Report().API
			assert.EqualValues(t, 1, rep.Accepted)
			assert.EqualValues(t, 1, rep.Refused)
			assert.Zero(t, rep.RateLimited)
			assert.Zero(t, rep.Conns)
			assert.EqualValues(t, 2, rep2.Accepted)
			assert.EqualValues(t, 1, rep2.RateLimited)
			assert.EqualValues(t, 1, rep2.Refused)

			require.NoError(t, l.Close())
			require.NoError(t, l2.Close())
			h.Seal(t)
			if !logged {
				assert.Empty(t, h.Records())
				return
			}
			assertOnlyTransitions(t, h.Records())
		})
	}
}

// TestAcceptErrorsRetriedAreCountedNotLogged: an EMFILE storm is a count
// and the latest error in Report, not a record per retry (nor per
// interval).
func TestAcceptErrorsRetriedAreCountedNotLogged(t *testing.T) {
	const n = 100
	h := logtest.New()
	clk := testclock.NewClock(t0)
	fake := newFake(1)
	l, err := listener.NewWithListen(loopback(listener.Config{Logger: h.Logger(), Clock: clk}), (&listenSeq{fakes: []net.Listener{fake}}).listen)
	require.NoError(t, err)
	defer l.Close()
	for range n {
		fake.give(t, nil, emfile)
		waitAlarm(t, clk) // the 5 ms backoff (a success in between resets it)
		clk.Advance(5 * time.Millisecond)
		fake.givePipe(t)
		mustAccept(t, l, listener.Controller)
	}
	rep := l.Report().Controller
	assert.EqualValues(t, n, rep.TemporaryErrors)
	assert.ErrorIs(t, rep.LastTemporaryError, syscall.EMFILE)
	clk.Advance(time.Hour) // no timer of the listener's is armed: nothing fires
	require.NoError(t, l.Close())
	h.Seal(t)
	recs := h.Records()
	assert.Len(t, recs, 3, "bound, opened, closed: %v", recs)
	assertOnlyTransitions(t, recs)
}
