package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/upgrade"
)

// The one record the package logs.
const msgPhase = "upgrade phase changed"

// noTimerArmed fails t if anything armed a timer on clk since it was made
// (or since the last call): a component that arms none cannot log, count
// or call a hook later, on its own.
func noTimerArmed(t *testing.T, clk *testclock.Clock, what string) {
	t.Helper()
	select {
	case <-clk.Alarms():
		t.Errorf("%s armed a timer: something would happen after the calls returned", what)
	default:
	}
}

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
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	require.NoError(t, g.SetRetryAfter(2*time.Second))
	clk.Advance(5 * time.Second)
	boom := errors.New("disk full")
	g.Fail(boom)
	g.Complete() // a no-op: the epoch has ended
	clk.Advance(time.Minute)
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
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
	var hooked []upgrade.Phase
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), Logger: h.Logger(), OnTransition: func(_, to upgrade.Phase, _ error) {
		hooked = append(hooked, to)
		assert.Len(t, h.Records(), len(hooked), "the record of a transition precedes its hook")
	}})
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	g.Complete()
	assert.Equal(t, []upgrade.Phase{upgrade.PhaseRunningSteps, upgrade.PhaseComplete}, hooked)
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

// 3,000 agents refused through a real HTTP server are counted, per phase
// and outcome, in Report, and not logged: the records are the phase
// changes alone. Once the upgrade is complete nothing is counted.
func TestRefusalsAreCountedNotLogged(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: h.Logger()})
	served := &served{}
	srv := newServer(t, upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(served))
	client := srv.Client()

	get(t, client, srv.URL, "/deploy", 3000, http.StatusServiceUnavailable)
	get(t, client, srv.URL, "/status", 10, http.StatusOK)
	assert.Equal(t, upgrade.CallsReport{Phase: upgrade.PhaseChecking, Admitted: 10, Refused: 3000}, calls(g)[upgrade.PhaseChecking])

	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	get(t, client, srv.URL, "/deploy", 500, http.StatusServiceUnavailable)
	g.Fail(errors.New("disk full"))
	get(t, client, srv.URL, "/deploy", 200, http.StatusConflict)
	get(t, client, srv.URL, "/status", 5, http.StatusOK)

	// PhaseComplete: served, not counted; the counters keep their totals
	// across epochs.
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	g.Complete()
	get(t, client, srv.URL, "/deploy", 50, http.StatusOK)
	assert.Equal(t, map[upgrade.Phase]upgrade.CallsReport{
		upgrade.PhaseChecking:     {Phase: upgrade.PhaseChecking, Admitted: 10, Refused: 3000},
		upgrade.PhaseRunningSteps: {Phase: upgrade.PhaseRunningSteps, Refused: 500},
		upgrade.PhaseFailed:       {Phase: upgrade.PhaseFailed, Admitted: 5, Refused: 200},
		upgrade.PhaseDraining:     {Phase: upgrade.PhaseDraining},
	}, calls(g))
	assert.Equal(t, int64(10+5+50), served.n.Load(), "only admitted calls ran")
	assert.Len(t, h.Records(), 4, "3,715 refused or allowlisted calls, four phase changes: four records")
	assert.Len(t, h.Matching(msgPhase), 4)
	noTimerArmed(t, clk, "the gate")
}

// The newcomer's test logger panicked: "calls refused during upgrade ...
// interval=10.0s" was logged 10 s after the refusals, long after the test
// that made them had ended. A gate logs only inside the calls made to it:
// once they have returned (the owner's end), nothing is logged, counted or
// hooked, however long the clock runs.
func TestGateLogsNothingAfterItsCallsReturned(t *testing.T) {
	clk := testclock.NewClock(t0)
	h := logtest.New()
	hooks := 0
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: h.Logger(), OnTransition: func(upgrade.Phase, upgrade.Phase, error) { hooks++ }})
	mw := upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(bareHandler)
	for _, path := range []string{"/deploy", "/deploy", "/status"} {
		mw.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, nil))
	}
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	g.Complete()
	want, recs, hooked := calls(g), len(h.Records()), hooks

	h.Seal(t) // the owner is done with the gate
	noTimerArmed(t, clk, "the gate")
	clk.Advance(time.Hour)
	assert.Equal(t, want, calls(g), "nothing counted later")
	assert.Len(t, h.Records(), recs, "nothing logged later")
	assert.Equal(t, hooked, hooks, "no hook called later")
}

// A SIGTERM mid-upgrade (RunSteps' ctx ends) is the owner's ordinary
// cancellation, not a problem: the gate stays in progress and logs no
// warning — only the transition into running-steps, at INFO.
func TestCancelledRunStepsIsNoWarning(t *testing.T) {
	h := logtest.New()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0), Logger: h.Logger()})
	ctx, sigterm := context.WithCancel(context.Background())
	err := g.RunSteps(ctx, func(ctx context.Context) error {
		sigterm()
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	h.Seal(t)
	assert.Equal(t, upgrade.PhaseRunningSteps, g.Phase())
	for _, r := range h.Records() {
		assert.Equal(t, slog.LevelInfo, r.Level, "%v", r)
	}
	assert.Len(t, h.Records(), 1)
}

// Admit is the one per-call guard, the one Middleware and grpcupgrade
// use: it counts what it decides while the gate refuses, and refuses with
// one shared error per gate state.
func TestAdmitCounts(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeInProgress)
	assert.NoError(t, g.Admit(true))
	assert.Same(t, g.Admit(false), g.Admit(false), "refusals share one error")
	g.Fail(errors.New("disk full"))
	assert.ErrorIs(t, g.Admit(false), upgrade.ErrUpgradeFailed)
	assert.NoError(t, g.Admit(true))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	g.Complete()
	assert.NoError(t, g.Admit(false))
	assert.NoError(t, g.Admit(true))
	assert.Equal(t, []upgrade.CallsReport{
		{Phase: upgrade.PhaseChecking, Admitted: 1, Refused: 3},
		{Phase: upgrade.PhaseRunningSteps},
		{Phase: upgrade.PhaseFailed, Admitted: 1, Refused: 1},
		{Phase: upgrade.PhaseDraining},
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

// The clients take no logger: WithNotify is their one hook, and it runs
// inside the call. A call whose ctx ends while it waits (a SIGTERM)
// returns the context's error and leaves nothing behind — no timer, no
// hook called later — for Retry and RetryTransport alike.
func TestClientsStopWithTheirCall(t *testing.T) {
	refusal := &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: time.Second}
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, _, _ := gatedServer(t, g)
	for name, call := range map[string]func(context.Context, ...upgrade.RetryOption) error{
		"Retry": func(ctx context.Context, opts ...upgrade.RetryOption) error {
			return upgrade.Retry(ctx, func(context.Context) error { return refusal }, opts...)
		},
		"RetryTransport": func(ctx context.Context, opts ...upgrade.RetryOption) error {
			client := &http.Client{Transport: upgrade.RetryTransport(nil, opts...)}
			defer client.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("deploy"))
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := testclock.NewClock(t0)
			var notified atomic.Int64
			ctx, sigterm := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- call(ctx, upgrade.WithClock(clk), upgrade.WithNotify(func(int, error, time.Duration) { notified.Add(1) }))
			}()
			<-clk.Alarms() // waiting out the refusal
			sigterm()
			err := <-done
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal")
			n := notified.Load()
			noTimerArmed(t, clk, name+" after it returned")
			clk.Advance(time.Hour)
			assert.Equal(t, n, notified.Load(), "no hook after the call returned")
		})
	}
}

// RetryTransport keeps its options, so its hook sees the waits of all its
// requests: 20 requests refused together each wait once (and nothing
// else arms a timer), and each is executed once the upgrade completes.
func TestRetryTransportHooksTheWaitsOfAllItsRequests(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, executed, _ := gatedServer(t, g)
	var waits atomic.Int64
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(clk),
		upgrade.WithNotify(func(int, error, time.Duration) { waits.Add(1) }))}
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
	// Every request waits (at most 2 s, the server's [R, 2R]); the
	// upgrade completes meanwhile.
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, n))
	g.Complete()
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, n))
	wg.Wait()
	assert.Len(t, executed.executed(), n)
	assert.Equal(t, int64(n), waits.Load())
}
