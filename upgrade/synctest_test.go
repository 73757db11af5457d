package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/upgrade"
)

// These tests run gates and their clients inside a testing/synctest
// bubble with their default clocks (a nil GateConfig.Clock, no WithClock:
// clock.WallClock, whose time.Now and timers are the bubble's fake time
// there). Servers are reached through inMemory, not a socket: a goroutine
// blocked on a socket is not durably blocked, and fake time would stand
// still. So every wait is exactly the Retry-After a refusal carried.

// inMemory is an http.RoundTripper that serves each request with h on the
// calling goroutine, through an httptest.ResponseRecorder.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	if req.Body != nil {
		_ = req.Body.Close() // a RoundTripper closes the request's body
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// waits collects the waits a client's WithNotify reports.
type waits struct {
	mu sync.Mutex
	ds []time.Duration
}

func (w *waits) notify(_ int, _ error, d time.Duration) {
	w.mu.Lock()
	w.ds = append(w.ds, d)
	w.mu.Unlock()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.ds...)
}

func (w *waits) sum() (total time.Duration) {
	for _, d := range w.all() {
		total += d
	}
	return total
}

// assertHints checks that every wait was a server's hint, whole seconds
// in [lo, hi].
func assertHints(t *testing.T, ds []time.Duration, lo, hi time.Duration) {
	t.Helper()
	for i, d := range ds {
		assert.True(t, d >= lo && d <= hi && d%time.Second == 0, "wait %d: %v, want whole seconds in [%v, %v]", i, d, lo, hi)
	}
}

// refused sums the calls a gate refused, in every phase.
func refused(g *upgrade.Gate) (n uint64) {
	for _, c := range g.Report().Calls {
		n += c.Refused
	}
	return n
}

// readyz returns a board's verbose readiness answer.
func readyz(b *gate.Board) string {
	return serveBody(boardview.ReadyHandler(b), "/readyz?verbose")
}

func serveBody(h http.Handler, path string) string {
	resp := serve(h, "GET", path)
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// An upgrade through its phases in fake time — checking for 3s, steps of
// 2s and 5s, a second attempt whose step fails after 4s, a third cut by
// SIGTERM after 1.5s — with every phase's start, every logged "lasted"
// and hook, and a board's readiness answer exact.
func TestSyncTestGatePhasesInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type change struct {
			from, to upgrade.Phase
			at       time.Duration
		}
		var changes []change // the hook runs on the goroutine that changed the phase: this one
		logs := logtest.New()
		start := time.Now()
		g := upgrade.NewGate(upgrade.GateConfig{Logger: logs.Logger(), OnTransition: func(from, to upgrade.Phase, _ error) {
			changes = append(changes, change{from, to, time.Since(start)})
		}})
		b := gate.NewBoard(gate.BoardConfig{Name: "c0"})
		defer b.Close()
		upgraded := b.Follow("upgrade", g)

		time.Sleep(3 * time.Second) // checking whether new binaries are needed
		assert.Equal(t, "[-]upgrade locked for 3s (checking whether new agent binaries are needed)\nreadyz check failed\n", readyz(b))
		require.NoError(t, g.RunSteps(context.Background(), func(context.Context) error {
			time.Sleep(2 * time.Second)
			assert.Equal(t, "[-]upgrade locked for 5s (running upgrade steps)\nreadyz check failed\n", readyz(b))
			time.Sleep(5 * time.Second)
			return nil
		}))
		assert.Equal(t, 10*time.Second, time.Since(start))
		require.NoError(t, gate.Wait(context.Background(), upgraded))
		assert.Equal(t, 10*time.Second, b.Report()[0].For)
		r := g.Report()
		assert.Equal(t, upgrade.PhaseComplete, r.Phase)
		assert.Equal(t, start.Add(10*time.Second), r.Since)

		diskFull := errors.New("disk full")
		err := g.RunSteps(context.Background(), func(context.Context) error {
			time.Sleep(4 * time.Second)
			return diskFull
		})
		require.ErrorIs(t, err, diskFull)
		r = g.Report()
		assert.Equal(t, upgrade.PhaseFailed, r.Phase)
		assert.Equal(t, uint64(2), r.Epoch)
		assert.Equal(t, start.Add(14*time.Second), r.Since)

		ctx, sigterm := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer sigterm()
		err = g.RunSteps(ctx, func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Hour):
				return nil
			}
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 15500*time.Millisecond, time.Since(start))
		r = g.Report()
		assert.Equal(t, upgrade.PhaseRunningSteps, r.Phase, "stopped, not failed")
		assert.Equal(t, start.Add(14*time.Second), r.Since)
		assert.Equal(t, uint64(3), r.Epoch)

		C, RS, OK, F := upgrade.PhaseChecking, upgrade.PhaseRunningSteps, upgrade.PhaseComplete, upgrade.PhaseFailed
		assert.Equal(t, []change{
			{C, RS, 3 * time.Second}, {RS, OK, 10 * time.Second},
			{OK, RS, 10 * time.Second}, {RS, F, 14 * time.Second},
			{F, RS, 14 * time.Second},
		}, changes)
		var lasted []string
		for _, rec := range logs.Matching("upgrade phase changed") {
			lasted = append(lasted, rec.Str("from")+" "+rec.Attrs["lasted"].Duration().String())
		}
		assert.Equal(t, []string{"checking 3s", "running-steps 7s", "complete 0s", "running-steps 4s", "failed 0s"}, lasted)
	})
}

// A client waits the upgrade out with Retry against the gate's
// Middleware: each wait is exactly the Retry-After of the refusal before
// it (whole seconds in [R, 2R]), the call returns as soon as the upgrade
// has completed — the attempt before the last was refused during it — and
// it was executed once.
func TestSyncTestRetryWaitsOutTheUpgradeInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const R, steps = 2 * time.Second, 30500 * time.Millisecond
		g := upgrade.NewGate(upgrade.GateConfig{})
		require.NoError(t, g.SetRetryAfter(R))
		var executed served
		client := &http.Client{Transport: inMemory{upgrade.Middleware(g, nil)(&executed)}}
		start := time.Now()
		go func() {
			assert.NoError(t, g.RunSteps(context.Background(), func(context.Context) error {
				time.Sleep(steps)
				return nil
			}))
		}()

		var w waits
		require.NoError(t, upgrade.Retry(context.Background(), call(client, "http://c0/deploy"), upgrade.WithNotify(w.notify)))
		took, ds := time.Since(start), w.all()
		assert.Equal(t, w.sum(), took, "Retry waits exactly what the server says, nothing more")
		assertHints(t, ds, R, 2*R)
		require.NotEmpty(t, ds)
		assert.Greater(t, took, steps)
		assert.Less(t, took-ds[len(ds)-1], steps, "the attempt before the last was refused during the upgrade")
		assert.Equal(t, int64(1), executed.n.Load())
		assert.Equal(t, uint64(len(ds)), refused(g), "every refusal waited out once")
		t.Logf("%d refusals, done after %v of fake time", len(ds), took)
	})
}

// When the server's wait outlasts ctx's deadline, Retry returns at once:
// at the instant of the refusal, saying exactly how far away the deadline
// was.
func TestSyncTestRetryStopsWhenTheServersWaitOutlastsTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const R, deadline = 2 * time.Second, 3 * time.Second
		g := upgrade.NewGate(upgrade.GateConfig{}) // checking, for ever
		require.NoError(t, g.SetRetryAfter(R))
		client := &http.Client{Transport: inMemory{upgrade.Middleware(g, nil)(&served{})}}
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		var w waits
		err := upgrade.Retry(ctx, call(client, "http://c0/deploy"), upgrade.WithNotify(w.notify))
		took := time.Since(start)
		require.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, w.sum(), took, "returned at the refusal, without waiting")
		assert.Less(t, took, deadline)
		assertHints(t, w.all(), R, 2*R)
		assert.ErrorContains(t, err, fmt.Sprintf("the server's wait outlasts ctx's deadline, %v away", deadline-took))
		assert.Equal(t, uint64(len(w.all())+1), refused(g))
	})
}

// WaitReady polls ReadyHandler until the upgrade completes, waiting
// exactly each refusal's Retry-After; on the next attempt, whose steps
// fail, it stops at the first probe after the failure, with its cause.
func TestSyncTestWaitReadyInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const R = time.Second
		g := upgrade.NewGate(upgrade.GateConfig{})
		require.NoError(t, g.SetRetryAfter(R))
		client := &http.Client{Transport: inMemory{upgrade.ReadyHandler(g)}}
		runSteps := func(d time.Duration, err error) {
			go func() {
				_ = g.RunSteps(context.Background(), func(context.Context) error {
					time.Sleep(d)
					return err
				})
			}()
		}

		start := time.Now()
		runSteps(10500*time.Millisecond, nil)
		var w waits
		require.NoError(t, upgrade.WaitReady(context.Background(), client, "http://c0/ready", upgrade.WithNotify(w.notify)))
		took, ds := time.Since(start), w.all()
		assert.Equal(t, w.sum(), took)
		assertHints(t, ds, R, 2*R)
		require.NotEmpty(t, ds)
		assert.Greater(t, took, 10500*time.Millisecond)
		assert.Less(t, took-ds[len(ds)-1], 10500*time.Millisecond)

		require.NoError(t, g.Enter(upgrade.PhaseChecking)) // a new attempt, refused from now
		start = time.Now()
		runSteps(7500*time.Millisecond, errors.New("disk full"))
		w = waits{}
		err := upgrade.WaitReady(context.Background(), client, "http://c0/ready", upgrade.WithNotify(w.notify))
		took, ds = time.Since(start), w.all()
		require.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
		assert.ErrorContains(t, err, "disk full")
		assert.Equal(t, w.sum(), took)
		assertHints(t, ds, R, 2*R)
		require.NotEmpty(t, ds)
		assert.Greater(t, took, 7500*time.Millisecond)
		assert.Less(t, took-ds[len(ds)-1], 7500*time.Millisecond)
	})
}

// A herd of 20 clients, each with its own RetryTransport, POSTs while the
// steps run for 30.5s: each waits exactly the refusals it was given,
// replays its body, and is executed once; the server's spread brings them
// back within 2R of the upgrade's end, not all at once.
func TestSyncTestRetryTransportHerdInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const R, steps, n = 2 * time.Second, 30500 * time.Millisecond, 20
		g := upgrade.NewGate(upgrade.GateConfig{})
		require.NoError(t, g.SetRetryAfter(R))
		var (
			mu     sync.Mutex
			bodies []string
		)
		api := upgrade.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(body))
			mu.Unlock()
		}))
		require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
		start := time.Now()
		go func() {
			assert.NoError(t, g.RunSteps(context.Background(), func(context.Context) error {
				time.Sleep(steps)
				return nil
			}))
		}()

		back := make(map[time.Duration]int) // when clients returned
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var w waits
				client := &http.Client{Transport: upgrade.RetryTransport(inMemory{api}, upgrade.WithNotify(w.notify))}
				resp, err := client.Post("http://c0/deploy", "text/plain", strings.NewReader(fmt.Sprint("deploy ", i)))
				took := time.Since(start)
				if !assert.NoError(t, err) {
					return
				}
				_ = resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, w.sum(), took, "client %d", i)
				assertHints(t, w.all(), R, 2*R)
				assert.True(t, took > steps && took <= steps+2*R, "client %d back after %v", i, took)
				mu.Lock()
				back[took]++
				mu.Unlock()
			})
		}
		wg.Wait()
		assert.Len(t, bodies, n, "each executed once")
		for i := range n {
			assert.Contains(t, bodies, fmt.Sprint("deploy ", i))
		}
		assert.Greater(t, len(back), 1, "spread over several instants: %v", back)
	})
}

// Without a server's hint Retry waits its own jittered backoff, on the
// bubble's clock too: each wait within its doubling bound, and the call
// returns exactly when the waits add up.
func TestSyncTestRetryBackoffInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const base, refusals = 100 * time.Millisecond, 6
		calls := 0
		start := time.Now()
		var w waits
		err := upgrade.Retry(context.Background(), func(context.Context) error {
			if calls++; calls <= refusals {
				return &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps} // no hint
			}
			return nil
		}, upgrade.WithBackoff(base, time.Second), upgrade.WithNotify(w.notify))
		require.NoError(t, err)
		ds := w.all()
		require.Len(t, ds, refusals)
		assert.Equal(t, w.sum(), time.Since(start))
		for i, d := range ds {
			bound := min(base<<i, time.Second)
			assert.True(t, d > 0 && d <= bound, "wait %d: %v, want (0, %v]", i+1, d, bound)
		}
	})
}

// A backoff cut to fit inside the deadline is cut once: after that last
// attempt Retry waits for the deadline. Before, each refusal cut the wait
// again toward zero, and under a fake clock fn was called in a loop that
// never blocked (millions of calls at 2.999999999s, never returning).
func TestSyncTestRetryBackoffNeverSpinsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		calls := 0
		err := upgrade.Retry(ctx, func(context.Context) error {
			calls++
			return &upgrade.InProgressError{Phase: upgrade.PhaseChecking} // no RetryAfter: a backoff
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
		assert.Equal(t, 3*time.Second, time.Since(start), "returns at the deadline")
		assert.Less(t, calls, 64, "attempts are backoffs, not a spin")
	})
}
