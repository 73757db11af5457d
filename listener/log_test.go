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

	"github.com/coldstart-go/coldstart/internal/logcount"
	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/listener"
)

const (
	msgCounts     = "connections rate-limited or refused"
	msgTempErrors = "accept errors retried"
)

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
// bind error, so it must be in the log, not only on APIFailed.
func TestLogsTheAPIPortFailingToOpen(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer squatter.Close()
	addr := squatter.Addr().String()
	h := logtest.New()
	stable := make(chan struct{})
	l := newListener(t, listener.Config{Logger: h.Logger(), APIAddr: addr, OpenAPIWhen: stable})
	close(stable)
	select {
	case <-l.APIFailed():
	case <-time.After(guard):
		t.Fatal("APIFailed did not close")
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

// TestThousandsOfRateLimitedAcceptsMakeOneRecord: 3,000 agents through a
// rate-limited API port are counted exactly in Report and logged as one
// record with the count, not a line per connection.
func TestThousandsOfRateLimitedAcceptsMakeOneRecord(t *testing.T) {
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
			if i == 2 {
				waitAlarm(t, clk) // the first count arms the log interval
			}
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
	assert.Empty(t, h.Matching(msgCounts), "logged before the interval ended")

	require.NoError(t, clk.WaitAdvance(logcount.DefaultInterval, guard, 1))
	recs := h.WaitMessage(t, msgCounts, 1)
	require.Len(t, recs, 1)
	assert.Equal(t, slog.LevelInfo, recs[0].Level)
	assert.Equal(t, "api", recs[0].Str("port"))
	assert.EqualValues(t, n-2, recs[0].Uint64(t, "rate_limited"))
	assert.EqualValues(t, 0, recs[0].Uint64(t, "refused"))
	assert.Len(t, h.Records(), 2+2+1, "bound and opened for each port, and the counts")
}

// TestRefusedConnsAreCounted: a connection the listener holds (for the
// rate limit, or for an Accept) when the API port closes is closed
// unserved and counted as refused, with or without a logger; Close logs
// the counts still pending.
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
			recs := h.Matching(msgCounts)
			if !logged {
				assert.Empty(t, h.Records())
				return
			}
			require.Len(t, recs, 2, "Close logs what the interval has not yet")
			assert.EqualValues(t, 1, recs[0].Uint64(t, "refused"))
			assert.EqualValues(t, 0, recs[0].Uint64(t, "rate_limited"))
			assert.EqualValues(t, 1, recs[1].Uint64(t, "refused"))
			assert.EqualValues(t, 1, recs[1].Uint64(t, "rate_limited"))
			for _, r := range recs {
				assert.Equal(t, "api", r.Str("port"))
			}
		})
	}
}

// TestAcceptErrorsRetriedAreLoggedAsACount: an EMFILE storm is one
// warning per interval with the count and the error, not one per retry.
func TestAcceptErrorsRetriedAreLoggedAsACount(t *testing.T) {
	const n = 100
	h := logtest.New()
	clk := testclock.NewClock(t0)
	fake := newFake(1)
	l, err := listener.NewWithListen(loopback(listener.Config{Logger: h.Logger(), Clock: clk}), (&listenSeq{fakes: []net.Listener{fake}}).listen)
	require.NoError(t, err)
	defer l.Close()
	for i := range n {
		fake.give(t, nil, emfile)
		if i == 0 {
			waitAlarm(t, clk) // the log interval
		}
		waitAlarm(t, clk) // the 5 ms backoff (a success in between resets it)
		clk.Advance(5 * time.Millisecond)
		fake.givePipe(t)
		mustAccept(t, l, listener.Controller)
	}
	assert.EqualValues(t, n, l.Report().Controller.TemporaryErrors)
	require.NoError(t, clk.WaitAdvance(logcount.DefaultInterval, guard, 1))
	recs := h.WaitMessage(t, msgTempErrors, 1)
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, slog.LevelWarn, r.Level)
	assert.Equal(t, "controller", r.Str("port"))
	assert.EqualValues(t, n, r.Uint64(t, "errors"))
	assert.ErrorIs(t, r.Attrs["err"].Any().(error), syscall.EMFILE)
	assert.Empty(t, h.Matching(msgCounts), "nothing was rate-limited or refused")
}
