package upgrade_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade"
)

const waitTimeout = 10 * time.Second // how long a test waits for a timer to be armed

// call makes one HTTP request and turns the answer into an error, as a
// client under Retry does.
func call(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		defer io.Copy(io.Discard, resp.Body)
		if err := upgrade.ErrorFromResponse(resp); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
	})
	return srv
}

// TestRetryWaitsOutAnUpgradeAgainstARealServer: the deployer of incident 3,
// done right. The client is refused while the server upgrades, waits at
// least the server's Retry-After (on the test clock), and its call runs
// exactly once when the upgrade completes.
func TestRetryWaitsOutAnUpgradeAgainstARealServer(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	require.NoError(t, g.SetRetryAfter(5*time.Second))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	h := &served{}
	var hits atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		upgrade.Middleware(g, nil)(h).ServeHTTP(w, r)
	}))

	type refused struct{ hint, wait time.Duration }
	waits := make(chan refused, 10)
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(context.Background(), call(srv.Client(), srv.URL),
			upgrade.WithNotify(func(attempt int, err error, wait time.Duration) {
				var ip *upgrade.InProgressError
				assert.ErrorAs(t, err, &ip)
				waits <- refused{ip.RetryAfter(), wait}
			}), upgrade.WithClock(clk))
	}()

	// Refused twice while the steps run; each wait is exactly Retry-After,
	// which the server drew from [5 s, 10 s]: one jitter, the server's.
	for attempt := 1; attempt <= 2; attempt++ {
		r := <-waits
		assert.True(t, r.hint >= 5*time.Second && r.hint <= 10*time.Second, "attempt %d: Retry-After %v not in [5s, 10s]", attempt, r.hint)
		assert.Equal(t, r.hint, r.wait, "attempt %d waits Retry-After, no jitter on top", attempt)
		wait := r.wait
		// Just short of the wait nothing happens...
		require.NoError(t, clk.WaitAdvance(wait-time.Nanosecond, waitTimeout, 1))
		require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1)) // sync: the same timer is still armed
		assert.Equal(t, int64(attempt), hits.Load(), "retried before Retry-After had passed")
		if attempt == 2 {
			g.Complete()
		}
		// ...and at the wait the call is made again.
		require.NoError(t, clk.WaitAdvance(time.Nanosecond, waitTimeout, 1))
	}
	require.NoError(t, <-done)
	assert.Equal(t, int64(3), hits.Load())
	assert.Equal(t, int64(1), h.n.Load(), "executed once, when the upgrade was complete")
}

func TestRetryStopsAtOnceWhenTheUpgradeFailed(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	g.Fail(errors.New("step 9 failed"))
	var hits atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		upgrade.Middleware(g, nil)(&served{}).ServeHTTP(w, r)
	}))
	err := upgrade.Retry(context.Background(), call(srv.Client(), srv.URL), upgrade.WithClock(clk))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.ErrorContains(t, err, "step 9 failed")
	assert.Equal(t, int64(1), hits.Load())

	// Even a predicate that would retry everything cannot retry a failed upgrade.
	err = upgrade.Retry(context.Background(), call(srv.Client(), srv.URL), upgrade.WithRetryIf(func(error) bool { return true }), upgrade.WithClock(clk))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.Equal(t, int64(2), hits.Load())
}

func TestRetryStopsAtOnceOnOtherErrors(t *testing.T) {
	boom := errors.New("permission denied")
	calls := 0
	err := upgrade.Retry(context.Background(), func(context.Context) error { calls++; return boom }, upgrade.WithClock(testclock.NewClock(t0)))
	assert.Equal(t, boom, err, "returned unwrapped")
	assert.Equal(t, 1, calls)
}

func TestRetryReturnsAtOnceWhenRetryAfterOutlastsTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls := 0
	err := upgrade.Retry(ctx, func(context.Context) error {
		calls++
		return &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: time.Hour}
	}, upgrade.WithClock(testclock.NewClock(t0)))
	assert.Equal(t, 1, calls)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NoError(t, ctx.Err(), "it did not wait for the deadline")
	assert.ErrorContains(t, err, "retry after 1h0m0s")
	assert.ErrorContains(t, err, "deadline")
}

// A backoff that would overrun a deadline a minute away is shortened to fit
// it, so that the next attempt still happens; a server's hint that fits is
// kept exactly.
func TestRetryShortensABackoffToFitTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hint     time.Duration
		min, max time.Duration
	}{
		{name: "a 2-minute backoff", min: 0, max: time.Minute},
		{name: "a 50 s hint", hint: 50 * time.Second, min: 50 * time.Second, max: 50 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var wait time.Duration
				err := upgrade.Retry(ctx, func(context.Context) error {
					return &upgrade.InProgressError{RetryDelay: tc.hint}
				}, upgrade.WithBackoff(2*time.Minute, 10*time.Minute),
					upgrade.WithNotify(func(_ int, _ error, w time.Duration) { wait = w; cancel() }), upgrade.WithClock(testclock.NewClock(t0)))
				cancel()
				assert.ErrorIs(t, err, context.Canceled)
				assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
				require.GreaterOrEqual(t, wait, tc.min)
				require.LessOrEqual(t, wait, tc.max)
			}
		})
	}
}

// "after 1 attempts" read badly in every log of a client stopped early.
func TestRetryStoppedErrorCountsAttemptsInWords(t *testing.T) {
	for _, n := range []int{1, 2} {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		// A backoff of a nanosecond on the wall clock: the first wait of
		// the two-attempt case passes at once.
		err := upgrade.Retry(ctx, func(context.Context) error {
			calls++
			return &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps}
		}, upgrade.WithBackoff(time.Nanosecond, time.Nanosecond), upgrade.WithNotify(func(attempt int, _ error, _ time.Duration) {
			if attempt == n {
				cancel()
			}
		}))
		want := map[int]string{1: "after 1 attempt: ", 2: "after 2 attempts: "}[n]
		assert.ErrorContains(t, err, want)
		assert.Equal(t, n, calls)
	}
}

func TestRetryCtxEndsTheWaitPromptly(t *testing.T) {
	clk := testclock.NewClock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(ctx, func(context.Context) error {
			return &upgrade.InProgressError{Phase: upgrade.PhaseChecking, RetryDelay: time.Hour}
		}, upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1)) // Retry is waiting on its timer
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal is kept")
	case <-time.After(waitTimeout):
		t.Fatal("Retry did not return when ctx ended")
	}
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 0), "the timer was stopped")

	calls := 0
	err := upgrade.Retry(ctx, func(context.Context) error { calls++; return nil }, upgrade.WithClock(clk))
	assert.Equal(t, context.Canceled, err)
	assert.Zero(t, calls, "an ended ctx calls nothing")
}

func TestRetryNotify(t *testing.T) {
	clk := testclock.NewClock(t0)
	type note struct {
		attempt int
		wait    time.Duration
	}
	var notes []note
	calls := 0
	stop := errors.New("permission denied")
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(context.Background(), func(context.Context) error {
			if calls++; calls == 3 {
				return stop
			}
			return &upgrade.InProgressError{}
		}, upgrade.WithJitter(0), upgrade.WithBackoff(time.Second, 3*time.Second),
			upgrade.WithNotify(func(attempt int, _ error, wait time.Duration) { notes = append(notes, note{attempt, wait}) }), upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1))
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, 1))
	assert.Equal(t, stop, <-done)
	assert.Equal(t, 3, calls)
	assert.Equal(t, []note{{1, time.Second}, {2, 2 * time.Second}}, notes, "no note for the error that stops it")
}

func TestRetryCustomPredicate(t *testing.T) {
	clk := testclock.NewClock(t0)
	flaky := errors.New("flaky")
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(context.Background(), func(context.Context) error {
			if calls++; calls < 3 {
				return flaky
			}
			return nil
		}, upgrade.WithRetryIf(func(err error) bool { return errors.Is(err, flaky) }), upgrade.WithJitter(0), upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(upgrade.DefaultBackoffBase, waitTimeout, 1))
	require.NoError(t, clk.WaitAdvance(2*upgrade.DefaultBackoffBase, waitTimeout, 1))
	assert.NoError(t, <-done)
	assert.Equal(t, 3, calls)
}

func TestRetryRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]upgrade.RetryOption{
		"zero base":      upgrade.WithBackoff(0, time.Second),
		"max below base": upgrade.WithBackoff(time.Second, time.Millisecond),
		"nil predicate":  upgrade.WithRetryIf(nil),
	} {
		called := false
		err := upgrade.Retry(context.Background(), func(context.Context) error { called = true; return nil }, opt)
		assert.ErrorIs(t, err, jujuerrors.NotValid, name)
		assert.False(t, called, name)
	}
	assert.ErrorIs(t, upgrade.Retry(context.Background(), nil), jujuerrors.NotValid)
}

// One rule for options: a nil RetryOption is ignored (it panicked), in
// every function that takes them, among other options or alone; a nil
// argument to WithClock or WithNotify means the default.
func TestANilOptionIsIgnored(t *testing.T) {
	refusedOnce := func() func(context.Context) error {
		refused := false
		return func(context.Context) error {
			if !refused {
				refused = true
				return &upgrade.InProgressError{Phase: upgrade.PhaseChecking, RetryDelay: time.Millisecond}
			}
			return nil
		}
	}
	var none upgrade.RetryOption
	assert.NoError(t, upgrade.Retry(context.Background(), refusedOnce(), none))
	assert.NoError(t, upgrade.Retry(context.Background(), refusedOnce(), nil, upgrade.WithClock(nil), nil, upgrade.WithNotify(nil), nil))

	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Complete()
	url, _, _ := gatedServer(t, g)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, nil, upgrade.WithNotify(nil), nil)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	srv := newServer(t, upgrade.ReadyHandler(g))
	assert.NoError(t, upgrade.WaitReady(context.Background(), srv.Client(), srv.URL, nil))
}

// One jitter: a coldstart server draws each refusal's Retry-After from
// [R, 2R], and the client waits exactly that. Measured before this rule, a
// 1 s hint made Retry wait 1.16–1.76 s and a 2 s hint 2.35–3.34 s on top of
// the server's spread, so a 100 ms upgrade cost an HTTP client ~3.5 s.
func TestRetryAddsNoJitterToAServerHint(t *testing.T) {
	for _, hint := range []time.Duration{time.Second, 2 * time.Second, 90 * time.Second} {
		for attempt := 1; attempt <= 10; attempt++ {
			for range 20 {
				w, err := upgrade.RetryWait(attempt, hint)
				require.NoError(t, err)
				require.Equal(t, hint, w, "attempt %d, hint %v", attempt, hint)
			}
		}
	}
	// A hint longer than the backoff cap is still honoured in full.
	w, err := upgrade.RetryWait(1, 2*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, w)

	// Without a hint: full jitter over the capped exponential backoff.
	for attempt, b := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 8: 30 * time.Second, 80: 30 * time.Second} {
		w, err := upgrade.RetryWait(attempt, 0, upgrade.WithJitter(0))
		require.NoError(t, err)
		assert.Equal(t, b, w, "attempt %d without jitter", attempt)
		for range 50 {
			w, err := upgrade.RetryWait(attempt, 0)
			require.NoError(t, err)
			assert.True(t, w >= 0 && w <= b, "attempt %d: %v not in [0, %v]", attempt, w, b)
		}
	}
}

// The herd is spread by the server alone: 200 clients refused together by
// a gate asking for 1 s are told 1 s or 2 s, and wait exactly that, so the
// total wait of every one lies in [R, 2R] and they do not all return at
// once.
func TestAHerdIsSpreadByTheServerAlone(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	h := upgrade.Middleware(g, nil)(&served{})
	seen := map[time.Duration]int{}
	for range 200 {
		refusal := upgrade.ErrorFromResponse(serve(h, "GET", "/"))
		require.ErrorIs(t, refusal, upgrade.ErrUpgradeInProgress)
		var ip *upgrade.InProgressError
		require.ErrorAs(t, refusal, &ip)
		w, err := upgrade.RetryWait(1, ip.RetryAfter())
		require.NoError(t, err)
		require.True(t, w >= time.Second && w <= 2*time.Second, "wait %v not in [R, 2R]", w)
		seen[w]++
	}
	assert.Len(t, seen, 2, "spread over both whole seconds: %v", seen)
}

func TestWaitReady(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	srv := newServer(t, upgrade.ReadyHandler(g))
	waits := make(chan time.Duration)
	done := make(chan error, 1)
	go func() {
		done <- upgrade.WaitReady(context.Background(), srv.Client(), srv.URL, upgrade.WithJitter(0),
			upgrade.WithNotify(func(_ int, err error, wait time.Duration) {
				assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
				waits <- wait
			}), upgrade.WithClock(clk))
	}()
	wait := <-waits // checking: refused, told 1 or 2 s
	assert.True(t, wait == time.Second || wait == 2*time.Second, "wait %v is not the Retry-After", wait)
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	require.NoError(t, clk.WaitAdvance(wait, waitTimeout, 1))
	wait = <-waits // refused again
	g.Complete()
	require.NoError(t, clk.WaitAdvance(wait, waitTimeout, 1))
	assert.NoError(t, <-done)
}

func TestWaitReadyStopsWhenTheUpgradeFailed(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("no binaries for 1.24.5 on linux/amd64"))
	srv := newServer(t, upgrade.ReadyHandler(g))
	err := upgrade.WaitReady(context.Background(), srv.Client(), srv.URL, upgrade.WithClock(testclock.NewClock(t0)))
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.ErrorContains(t, err, "1.24.5")
}

func TestWaitReadyRetriesAProxy503ButNotA404(t *testing.T) {
	clk := testclock.NewClock(t0)
	var hits atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "3")
			http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
			return
		}
		http.NotFound(w, r)
	}))
	done := make(chan error, 1)
	go func() {
		done <- upgrade.WaitReady(context.Background(), srv.Client(), srv.URL, upgrade.WithJitter(0), upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(3*time.Second, waitTimeout, 1))
	err := <-done
	assert.ErrorContains(t, err, "404")
	assert.Equal(t, int64(2), hits.Load())
}

func TestWaitReadyRetriesAServerThatIsNotListeningYet(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now: connection refused
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	err = upgrade.WaitReady(ctx, nil, "http://"+addr+"/ready", upgrade.WithJitter(0),
		upgrade.WithNotify(func(_ int, _ error, wait time.Duration) { waits = append(waits, wait); cancel() }), upgrade.WithClock(testclock.NewClock(t0)))
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "retried, and the last refusal is kept")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []time.Duration{upgrade.DefaultBackoffBase}, waits)
	http.DefaultClient.CloseIdleConnections()
}

func TestWaitReadyRejectsABadURL(t *testing.T) {
	assert.ErrorIs(t, upgrade.WaitReady(context.Background(), nil, "http://bad host/\x7f"), jujuerrors.NotValid)
}

func TestRetryWhenTheDeadlinePassesDuringACall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	clk := testclock.NewClock(t0)
	calls := 0
	err := upgrade.Retry(ctx, func(ctx context.Context) error {
		calls++
		<-ctx.Done() // a slow refusal: the deadline passes before it arrives
		return &upgrade.InProgressError{Phase: upgrade.PhaseChecking}
	}, upgrade.WithClock(clk))
	assert.Equal(t, 1, calls)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 0), "no timer left behind")
}

// A server (or proxy) may send an absurd Retry-After; ErrorFromResponse
// saturates it to the largest Duration. Adding jitter to that must not wrap
// around to a negative wait, which would retry at once, in a tight loop —
// the opposite of what the server asked. The same holds for a huge
// backoff cap after many attempts.
func TestRetryHugeWaitsSaturateInsteadOfWrapping(t *testing.T) {
	for _, hint := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 / 2} {
		for range 20 {
			w, err := upgrade.RetryWait(1, hint)
			require.NoError(t, err)
			require.GreaterOrEqual(t, w, hint, "hint %v: wait %v is shorter than asked", hint, w)
		}
	}
	for _, jitter := range []float64{0, 0.5, 1} {
		prev := time.Duration(0)
		for attempt := 1; attempt <= 100; attempt++ {
			full, err := upgrade.RetryWait(attempt, 0, upgrade.WithBackoff(time.Second, math.MaxInt64), upgrade.WithJitter(0))
			require.NoError(t, err)
			require.GreaterOrEqual(t, full, prev, "attempt %d: backoff %v fell back (overflow?)", attempt, full)
			prev = full
			w, err := upgrade.RetryWait(attempt, 0, upgrade.WithBackoff(time.Second, math.MaxInt64), upgrade.WithJitter(jitter))
			require.NoError(t, err)
			lo := float64(full) * (1 - jitter) * (1 - 1e-9) // float rounding aside
			require.True(t, float64(w) >= lo && w <= full, "jitter %v, attempt %d: wait %v not in [%.0f, %v]", jitter, attempt, w, lo, full)
		}
	}

	// End to end: Retry parks on a timer instead of calling again.
	clk := testclock.NewClock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(ctx, func(context.Context) error {
			calls.Add(1)
			return &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: math.MaxInt64}
		}, upgrade.WithClock(clk))
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1))
	require.NoError(t, clk.WaitAdvance(24*time.Hour, waitTimeout, 1)) // a day later: still waiting
	assert.Equal(t, int64(1), calls.Load())
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}
