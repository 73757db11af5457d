package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every line
}

func (r *logRecorder) log(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
}

// waitFor blocks until line has been logged.
func (r *logRecorder) waitFor(t *testing.T, line string) {
	t.Helper()
	for {
		r.mu.Lock()
		found := slices.Contains(r.lines, line)
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-time.After(timeout):
			t.Fatalf("no log line %q after %v in\n%v", line, timeout, r.snapshot())
		}
	}
}

func (r *logRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

func (r *logRecorder) index(t *testing.T, line string) int {
	t.Helper()
	lines := r.snapshot()
	i := slices.Index(lines, line)
	require.GreaterOrEqual(t, i, 0, "no log line %q in\n%v", line, lines)
	return i
}

const timeout = 10 * time.Second // a bound against hangs only

func TestAPIServerStartsOnlyAfterUpgradeStepsViaBounce(t *testing.T) {
	stepsDone := make(chan error)
	serving := make(chan struct{})
	rec := &logRecorder{}
	e := NewEngine(testclock.NewClock(time.Time{}), Manifolds(
		func(ctx context.Context) error { return <-stepsDone },
		func(ctx context.Context) error { close(serving); <-ctx.Done(); return nil },
	), time.Second, rec.log)
	go e.Run()

	// Finish the steps only once the api-server has been refused on the
	// flag's false: else the flag may be made after the gate opened, and
	// there is no bounce to see.
	rec.waitFor(t, "api-server: not started: upgrade steps not done: dependency not available")
	stepsDone <- nil
	select {
	case <-serving:
	case <-time.After(timeout):
		e.Stop()
		t.Fatalf("api-server never started; log:\n%v", rec.snapshot())
	}
	e.Stop() // the engine has logged everything once it has stopped
	notYet := rec.index(t, "api-server: not started: upgrade steps not done: dependency not available")
	bounced := rec.index(t, "upgrade-steps-flag: bounced (gate: unlocked, restart to see the new value)")
	started := rec.index(t, "api-server: started")
	assert.Less(t, notYet, bounced)
	assert.Less(t, bounced, started, "the api-server starts on the restarted flag")
}

func TestFailedUpgradeStepsRestartAfterDelayAndKeepAPIServerDown(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	attempts := make(chan chan error)
	serving := make(chan struct{})
	rec := &logRecorder{}
	e := NewEngine(clk, Manifolds(
		func(ctx context.Context) error {
			result := make(chan error)
			attempts <- result
			return <-result
		},
		func(ctx context.Context) error { close(serving); <-ctx.Done(); return nil },
	), time.Second, rec.log)
	go e.Run()
	defer e.Stop()

	(<-attempts) <- errors.New("schema migration failed")
	require.NoError(t, clk.WaitAdvance(time.Second, timeout, 1))
	select {
	case <-serving:
		t.Fatal("api-server started although the upgrade steps failed")
	case second := <-attempts:
		rec.index(t, "upgrade-steps-runner: failed: schema migration failed; restarting in 1s")
		second <- nil
	case <-time.After(timeout):
		t.Fatal("the runner was not restarted")
	}
	select {
	case <-serving:
	case <-time.After(timeout):
		t.Fatalf("api-server never started; log:\n%v", rec.snapshot())
	}
}

// ctlWorker is a worker the test ends: it exits when the test sends on end,
// or when killed unless it holds on kill (a worker slow to stop).
type ctlWorker struct {
	killed     chan struct{}
	once       sync.Once
	end        chan error
	holdOnKill bool
}

func (w *ctlWorker) Kill() { w.once.Do(func() { close(w.killed) }) }
func (w *ctlWorker) Wait() error {
	if w.holdOnKill {
		return <-w.end
	}
	select {
	case err := <-w.end:
		return err
	case <-w.killed:
		return nil
	}
}

// ctlManifold starts ctlWorkers, hands each to the test on started, and
// records in overlap a start while an earlier worker of it had not exited.
type ctlManifold struct {
	started chan *ctlWorker
	live    atomic.Int32
	overlap atomic.Bool
	hold    atomic.Bool // new workers hold on kill
}

func newCtl(holdOnKill bool) *ctlManifold {
	m := &ctlManifold{started: make(chan *ctlWorker, 8)}
	m.hold.Store(holdOnKill)
	return m
}

func (m *ctlManifold) manifold(inputs ...string) Manifold {
	return Manifold{
		Inputs: inputs,
		Start: func(get Getter) (Worker, error) {
			for _, in := range inputs {
				var w Worker
				if err := get(in, &w); err != nil {
					return nil, err
				}
			}
			if m.live.Add(1) > 1 {
				m.overlap.Store(true)
			}
			w := &ctlWorker{killed: make(chan struct{}), end: make(chan error, 1), holdOnKill: m.hold.Load()}
			m.started <- w
			return exitHook{w, &m.live}, nil
		},
		Output: func(w Worker, out any) error {
			p, ok := out.(*Worker)
			if !ok {
				return fmt.Errorf("want *Worker, got %T", out)
			}
			*p = w
			return nil
		},
	}
}

// exitHook counts a worker as gone once its Wait has returned.
type exitHook struct {
	*ctlWorker
	live *atomic.Int32
}

func (h exitHook) Wait() error { err := h.ctlWorker.Wait(); h.live.Add(-1); return err }

func next(t *testing.T, c chan *ctlWorker, what string) *ctlWorker {
	t.Helper()
	select {
	case w := <-c:
		return w
	case <-time.After(timeout):
		t.Fatalf("%s never started", what)
		return nil
	}
}

func stopWithin(t *testing.T, e *Engine) {
	t.Helper()
	stopped := make(chan struct{})
	go func() { e.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(timeout):
		t.Fatal("Stop did not return")
	}
}

// An input restarts while a dependent it killed is still stopping: the
// dependent must not start again until its old worker has exited, and then
// it starts on the new input.
func TestRestartWhileDependentIsStopping(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	a, slow, quick := newCtl(false), newCtl(true), newCtl(false)
	e := NewEngine(clk, map[string]Manifold{
		"a": a.manifold(),
		"b": slow.manifold("a"),  // its first worker exits only when the test says
		"c": quick.manifold("a"), // exits as soon as it is killed
	}, time.Second, (&logRecorder{}).log)
	go e.Run()
	defer stopWithin(t, e)

	a1, b1 := next(t, a.started, "a"), next(t, slow.started, "b")
	slow.hold.Store(false) // b's next workers stop when killed
	next(t, quick.started, "c")
	a1.end <- errors.New("boom")
	<-b1.killed
	require.NoError(t, clk.WaitAdvance(time.Second, timeout, 1)) // a's restart delay
	next(t, a.started, "a again")
	// c starts after b is considered in the same pass (names are sorted),
	// so by now a wrong start of b would have happened.
	next(t, quick.started, "c again")
	select {
	case <-slow.started:
		t.Fatal("b started again while its old worker was still stopping")
	default:
	}
	b1.end <- nil
	next(t, slow.started, "b again")
	assert.False(t, slow.overlap.Load(), "two b workers were alive at once")
	assert.False(t, a.overlap.Load())
}

// Stop while a restart is pending and a killed dependent has not exited:
// Stop waits for that dependent, ends the pending restart (goleak checks its
// goroutine), and starts nothing.
func TestStopDuringPendingRestart(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	a, slow, other := newCtl(false), newCtl(true), newCtl(false)
	e := NewEngine(clk, map[string]Manifold{
		"a": a.manifold(),
		"b": slow.manifold("a"),
		"c": other.manifold(), // running at Stop: its kill says Stop has begun
	}, time.Second, (&logRecorder{}).log)
	go e.Run()

	a1, b1 := next(t, a.started, "a"), next(t, slow.started, "b")
	c1 := next(t, other.started, "c")
	a1.end <- errors.New("boom")
	<-b1.killed
	require.NoError(t, clk.WaitAdvance(time.Second/2, timeout, 1)) // the restart is armed, not due
	stopped := make(chan struct{})
	go func() { e.Stop(); close(stopped) }()
	<-c1.killed
	b1.end <- nil // only now: a Stop that did not wait for b leaks its exit (goleak)
	select {
	case <-stopped:
	case <-time.After(timeout):
		t.Fatal("Stop did not return")
	}
	e.Stop() // idempotent
	assert.Empty(t, a.started, "nothing restarted after Stop")
	assert.Empty(t, slow.started)
}

// TestFlagOfAFailedGateIsNotRestarted: a flag ends with its gate's error
// when the gate fails; the engine tells that error (gate.ErrFailed) from a
// worker's own, names the gate, and does not restart a flag that could only
// fail again.
func TestFlagOfAFailedGateIsNotRestarted(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	upgraded := gate.New("upgrade-steps")
	var flags atomic.Int32
	rec := &logRecorder{}
	e := NewEngine(clk, map[string]Manifold{
		"upgrade-steps-flag": {Start: func(Getter) (Worker, error) {
			flags.Add(1)
			return gate.NewFlag(upgraded), nil
		}},
	}, time.Second, rec.log)
	go e.Run()
	rec.waitFor(t, "upgrade-steps-flag: started")
	upgraded.Fail(errors.New("disk full"))
	rec.waitFor(t, `upgrade-steps-flag: gate "upgrade-steps" failed (disk full): not restarted`)
	clk.Advance(time.Minute) // a restart delay would have ended many times over
	e.Stop()
	assert.Equal(t, int32(1), flags.Load(), "started once: %v", rec.snapshot())
}
