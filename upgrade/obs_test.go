package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/upgrade"
)

// The records the package logs.
const (
	msgPhase   = "upgrade phase changed"
	msgRefused = "calls refused during upgrade"
	msgWaits   = "waiting out upgrade refusals"
	msgGaveUp  = "gave up waiting for upgrade"
)

// interval is logcount's: how long a count waits to be logged.
const interval = 10 * time.Second

// calls is Report().Calls as a map, for exact assertions.
func calls(g *upgrade.Gate) map[upgrade.Phase]upgrade.CallsReport {
	m := make(map[upgrade.Phase]upgrade.CallsReport)
	for _, c := range g.Report().Calls {
		m[c.Phase] = c
	}
	return m
}

// Each phase change is one record: the new phase, the one it left and how
// long that lasted, the epoch; a failure at ERROR with its cause.
// SetRetryAfter is not a phase change and logs nothing.
func TestGateLogsEachPhaseChange(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: h.Logger()})
	assert.Empty(t, h.Records(), "a new gate logs nothing")

	clk.Advance(3 * time.Second)
	require.NoError(t, g.Enter(upgrade.RunningSteps))
	require.NoError(t, g.SetRetryAfter(2*time.Second))
	clk.Advance(5 * time.Second)
	boom := errors.New("disk full")
	g.Fail(boom)
	g.Complete() // a no-op: the epoch has ended
	clk.Advance(time.Minute)
	require.NoError(t, g.Enter(upgrade.Checking))
	clk.Advance(2 * time.Second)
	g.Complete()

	type rec struct {
		level               slog.Level
		phase, from, lasted string
		epoch               uint64
		err                 string
	}
	var got []rec
	for _, r := range h.Records() {
		require.Equal(t, msgPhase, r.Message)
		got = append(got, rec{r.Level, r.Str("phase"), r.Str("from"), r.Str("lasted"), r.Uint64(t, "epoch"), r.Str("err")})
	}
	assert.Equal(t, []rec{
		{slog.LevelInfo, "running-steps", "checking", "3s", 1, ""},
		{slog.LevelError, "failed", "running-steps", "5s", 1, "disk full"},
		{slog.LevelInfo, "checking", "failed", "1m0s", 2, ""},
		{slog.LevelInfo, "complete", "checking", "2s", 2, ""},
	}, got)
	assert.Equal(t, boom, h.Records()[1].Attrs["err"].Any(), "the cause itself, not its text")
}

// The hook and the log see the same transitions, in order, and a gate
// with no logger logs nothing while its hook still runs.
func TestGateLogsBesideItsHook(t *testing.T) {
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), Logger: h.Logger()})
	var hooked []upgrade.Phase
	g.OnTransition(func(_, to upgrade.Phase, _ error) {
		hooked = append(hooked, to)
		assert.Len(t, h.Records(), len(hooked), "the record of a transition precedes its hook")
	})
	require.NoError(t, g.Enter(upgrade.RunningSteps))
	g.Complete()
	assert.Equal(t, []upgrade.Phase{upgrade.RunningSteps, upgrade.Complete}, hooked)
}

// get sends n GETs of path to url from a few goroutines and checks each
// status.
func get(t *testing.T, client *http.Client, url, path string, n, status int) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for range work {
				resp, err := client.Get(url + path)
				if !assert.NoError(t, err) {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				assert.Equal(t, status, resp.StatusCode)
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// 3,000 agents refused through a real HTTP server make one record, not
// 3,000: the refusals are counted per phase and outcome, in Report and in
// one record per phase per interval, on the gate's clock. Once the upgrade
// is complete nothing is counted.
func TestRefusalsAreCountedAndLoggedOncePerInterval(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: h.Logger()})
	served := &served{}
	srv := newServer(t, upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(served))
	client := srv.Client()

	get(t, client, srv.URL, "/deploy", 3000, http.StatusServiceUnavailable)
	get(t, client, srv.URL, "/status", 10, http.StatusOK)
	assert.Equal(t, upgrade.CallsReport{Phase: upgrade.Checking, Admitted: 10, Refused: 3000}, calls(g)[upgrade.Checking])
	assert.Empty(t, h.Matching(msgRefused), "nothing logged before the interval is up")

	require.NoError(t, clk.WaitAdvance(interval, waitTimeout, 1)) // the one timer: the records'
	recs := h.WaitMessage(t, msgRefused, 1)
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, slog.LevelInfo, r.Level)
	assert.Equal(t, "checking", r.Str("phase"))
	assert.Equal(t, uint64(3000), r.Uint64(t, "refused"))
	assert.Equal(t, uint64(10), r.Uint64(t, "admitted"))
	assert.Equal(t, interval, r.Attrs["interval"].Duration())

	// The next interval: running steps, then failed. One record per phase,
	// the failed one at WARN (409s: clients stop).
	require.NoError(t, g.Enter(upgrade.RunningSteps))
	get(t, client, srv.URL, "/deploy", 500, http.StatusServiceUnavailable)
	g.Fail(errors.New("disk full"))
	get(t, client, srv.URL, "/deploy", 200, http.StatusConflict)
	get(t, client, srv.URL, "/status", 5, http.StatusOK)
	require.NoError(t, clk.WaitAdvance(interval, waitTimeout, 1))
	recs = h.WaitMessage(t, msgRefused, 3)
	require.Len(t, recs, 3)
	byPhase := map[string]logtest.Record{}
	for _, r := range recs[1:] {
		byPhase[r.Str("phase")] = r
	}
	assert.Equal(t, slog.LevelInfo, byPhase["running-steps"].Level)
	assert.Equal(t, uint64(500), byPhase["running-steps"].Uint64(t, "refused"))
	assert.Equal(t, uint64(0), byPhase["running-steps"].Uint64(t, "admitted"))
	assert.Equal(t, slog.LevelWarn, byPhase["failed"].Level)
	assert.Equal(t, uint64(200), byPhase["failed"].Uint64(t, "refused"))
	assert.Equal(t, uint64(5), byPhase["failed"].Uint64(t, "admitted"))

	// Complete: served, not counted, not logged; the counters keep their
	// totals across epochs.
	require.NoError(t, g.Enter(upgrade.Checking))
	g.Complete()
	get(t, client, srv.URL, "/deploy", 50, http.StatusOK)
	assert.Equal(t, map[upgrade.Phase]upgrade.CallsReport{
		upgrade.Checking:     {Phase: upgrade.Checking, Admitted: 10, Refused: 3000},
		upgrade.RunningSteps: {Phase: upgrade.RunningSteps, Refused: 500},
		upgrade.Failed:       {Phase: upgrade.Failed, Admitted: 5, Refused: 200},
	}, calls(g))
	assert.Equal(t, int64(10+5+50), served.n.Load(), "only admitted calls ran")
	assert.Len(t, h.Matching(msgRefused), 3, "3,715 refused or allowlisted calls, three records")
	assert.Len(t, h.Matching(msgPhase), 4)
}

// Admit is the counting guard for an RPC server of one's own; Err stays a
// plain read that counts nothing.
func TestAdmitCountsAndErrDoesNot(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	for range 3 {
		assert.ErrorIs(t, g.Err(), upgrade.ErrUpgradeInProgress)
	}
	assert.Equal(t, upgrade.CallsReport{Phase: upgrade.Checking}, calls(g)[upgrade.Checking], "Err counts nothing")

	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeInProgress)
	assert.NoError(t, g.Admit(true))
	assert.Same(t, g.Err(), g.Admit(false), "Admit refuses with Err's shared error")
	g.Fail(errors.New("disk full"))
	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeFailed)
	assert.NoError(t, g.Admit(true))
	require.NoError(t, g.Enter(upgrade.RunningSteps))
	g.Complete()
	assert.NoError(t, g.Admit(false))
	assert.NoError(t, g.Admit(true))
	assert.Equal(t, []upgrade.CallsReport{
		{Phase: upgrade.Checking, Admitted: 1, Refused: 2},
		{Phase: upgrade.RunningSteps},
		{Phase: upgrade.Failed, Admitted: 1, Refused: 1},
	}, g.Report().Calls, "no logger: counted all the same; complete: not counted")
}

// The middleware's allowed path allocates nothing, with or without a
// logger, in every phase.
func TestMiddlewareAllowedPathAllocatesNothingWithALogger(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, complete := range []bool{true, false} {
		for _, l := range []*slog.Logger{nil, logger} {
			t.Run(fmt.Sprintf("complete=%v,logger=%v", complete, l != nil), func(t *testing.T) {
				g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), Logger: l})
				if complete {
					g.Complete()
				}
				h := upgrade.Middleware(g, func(*http.Request) bool { return true })(bareHandler)
				w := &nopWriter{h: http.Header{}}
				r, _ := http.NewRequest("GET", "/status", nil)
				assert.Zero(t, testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }))
			})
		}
	}
}

// A client's waits are counted, not logged one by one: every call made
// with one WithLogger option adds to one record per interval, and a call
// that gives up (its ctx ended while it waited) is counted at WARN with
// its error.
func TestRetryLogsItsWaitsOncePerInterval(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	logs := upgrade.WithLogger(h.Logger()) // one client: one option, shared by its calls
	refusals := 3
	fn := func(context.Context) error {
		if refusals == 0 {
			return nil
		}
		refusals--
		return &upgrade.InProgressError{Phase: upgrade.RunningSteps, RetryDelay: time.Second}
	}
	done := make(chan error, 1)
	go func() { done <- upgrade.Retry(context.Background(), fn, logs, upgrade.WithClock(clk)) }()
	for range 3 {
		// The wait, and the records' timer armed by the first of them.
		require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 2))
	}
	require.NoError(t, <-done)

	// A second call of the same client: refused, then its ctx ends.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- upgrade.Retry(ctx, func(context.Context) error {
			return &upgrade.InProgressError{Phase: upgrade.Checking, RetryDelay: time.Second}
		}, logs, upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 2)) // waiting
	cancel()
	gaveUp := <-done
	require.ErrorIs(t, gaveUp, context.Canceled)
	assert.Empty(t, h.Records(), "nothing logged before the interval is up")

	require.NoError(t, clk.WaitAdvance(interval-3*time.Second, waitTimeout, 1))
	recs := h.WaitFor(t, "the waits and the give-up", func(rs []logtest.Record) bool { return len(rs) == 2 })
	byMsg := map[string]logtest.Record{}
	for _, r := range recs {
		byMsg[r.Message] = r
	}
	waits := byMsg[msgWaits]
	assert.Equal(t, slog.LevelInfo, waits.Level)
	assert.Equal(t, uint64(4), waits.Uint64(t, "waits"), "3 waits of the first call, 1 of the second")
	assert.Equal(t, interval, waits.Attrs["interval"].Duration())
	g := byMsg[msgGaveUp]
	assert.Equal(t, slog.LevelWarn, g.Level)
	assert.Equal(t, uint64(1), g.Uint64(t, "gave_up"))
	assert.Equal(t, gaveUp.Error(), g.Str("err"))
}

// The other way to give up: the server's wait outlasts ctx's deadline.
// Stopping at a failed upgrade, or at another error, is fn's own answer and
// not a give-up.
func TestRetryCountsAWaitBeyondTheDeadlineAsAGiveUp(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	logs := upgrade.WithLogger(h.Logger())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := upgrade.Retry(ctx, func(context.Context) error {
		return &upgrade.InProgressError{Phase: upgrade.Checking, RetryDelay: time.Hour}
	}, logs, upgrade.WithClock(clk))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, stop := range []error{&upgrade.FailedError{Err: errors.New("disk full")}, errors.New("connection refused")} {
		assert.Equal(t, stop, upgrade.Retry(ctx, func(context.Context) error { return stop }, logs, upgrade.WithClock(clk)))
	}
	require.NoError(t, clk.WaitAdvance(interval, waitTimeout, 1))
	recs := h.WaitMessage(t, msgGaveUp, 1)
	assert.Equal(t, uint64(1), recs[0].Uint64(t, "gave_up"))
	assert.True(t, strings.Contains(recs[0].Str("err"), "outlasts ctx's deadline"), recs[0].Str("err"))
	assert.Empty(t, h.Matching(msgWaits), "no wait began")
}

// RetryTransport keeps its options, so the waits of all its requests make
// one record: 20 requests refused together, one record with waits=20.
func TestRetryTransportLogsTheWaitsOfAllItsRequestsTogether(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, executed, _ := gatedServer(t, g)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(clk), upgrade.WithLogger(h.Logger()))}
	defer client.CloseIdleConnections()

	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Post(url, "text/plain", strings.NewReader("deploy"))
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
	// Every request waits (at most 2 s, the server's [R, 2R]), beside the
	// records' timer; the upgrade completes meanwhile.
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, n+1))
	g.Complete()
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, n+1))
	wg.Wait()
	assert.Len(t, executed.executed(), n)
	require.NoError(t, clk.WaitAdvance(interval-2*time.Second, waitTimeout, 1))
	recs := h.WaitMessage(t, msgWaits, 1)
	require.Len(t, h.Records(), 1)
	assert.Equal(t, uint64(n), recs[0].Uint64(t, "waits"))
}

// A RetryLog is built once and shared by separate calls: their waits make
// one record, and Close logs it at once, before the interval is up (a
// WithLogger per call would make a record per call, each an interval
// late). After Close, calls still retry but log nothing.
func TestRetryLogCountsManyCallsAndCloseFlushes(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	waits := &upgrade.RetryLog{Logger: h.Logger()}
	call := func() error {
		refused := false
		return upgrade.Retry(context.Background(), func(context.Context) error {
			if refused {
				return nil
			}
			refused = true
			return &upgrade.InProgressError{Phase: upgrade.RunningSteps, RetryDelay: time.Second}
		}, upgrade.WithClock(clk), waits.Option())
	}
	for range 3 {
		done := make(chan error, 1)
		go func() { done <- call() }()
		// The wait, beside the records' timer (armed by the first wait).
		require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 2))
		require.NoError(t, <-done)
	}
	assert.Empty(t, h.Records(), "the interval is not up")
	waits.Close()
	recs := h.Matching(msgWaits)
	require.Len(t, recs, 1, "one record for the three calls, logged by Close")
	assert.Equal(t, uint64(3), recs[0].Uint64(t, "waits"))

	done := make(chan error, 1)
	go func() { done <- call() }()
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1))
	require.NoError(t, <-done, "a call after Close still retries")
	waits.Close() // idempotent
	require.NoError(t, clk.WaitAdvance(interval, waitTimeout, 0))
	assert.Len(t, h.Records(), 1, "and logs nothing")
}

// A RetryLog without a Logger, or closed before its first call, logs
// nothing and still retries.
func TestRetryLogWithoutALoggerOrClosedFirst(t *testing.T) {
	var none upgrade.RetryLog
	none.Close()
	require.NoError(t, upgrade.Retry(context.Background(), func(context.Context) error { return nil }, none.Option()))

	h := logtest.New()
	closed := &upgrade.RetryLog{Logger: h.Logger()}
	closed.Close()
	clk := testclock.NewClock(t0)
	refused := false
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(context.Background(), func(context.Context) error {
			if refused {
				return nil
			}
			refused = true
			return &upgrade.InProgressError{Phase: upgrade.Checking, RetryDelay: time.Second}
		}, upgrade.WithClock(clk), closed.Option())
	}()
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1), "only the wait: a closed log arms no timer")
	require.NoError(t, <-done)
	assert.Empty(t, h.Records())
}
