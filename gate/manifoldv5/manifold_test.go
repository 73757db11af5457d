package manifoldv5_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/juju/worker/v5"
	"github.com/juju/worker/v5/dependency"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/manifoldv5"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The method sets of juju's worker/gate Waiter and Unlocker and of juju's
// engine.Flag, declared here as a juju agent declares them: types this
// module has never heard of.
type (
	jujuWaiter interface {
		Unlocked() <-chan struct{}
		IsUnlocked() bool
	}
	jujuUnlocker interface{ Unlock() }
	jujuFlag     interface{ Check() bool }
)

const (
	errorDelay = time.Second
	// bound only keeps a broken test from hanging; nothing waits it out.
	bound = 10 * time.Second
)

// event is one thing the engine did: a log line at a level, or a start.
type event struct {
	level string // TRACE, DEBUG, INFO, ERROR or START
	text  string
}

// recorder is the engine's Logger and Metrics: it keeps every event and
// lets a test wait for one, so that nothing waits by sleeping.
type recorder struct {
	mu     sync.Mutex
	events []event
	wake   chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{})} }

func (r *recorder) add(level, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{level, fmt.Sprintf(format, args...)})
	close(r.wake)
	r.wake = make(chan struct{})
}

func (r *recorder) Tracef(f string, a ...any) { r.add("TRACE", f, a...) }
func (r *recorder) Debugf(f string, a ...any) { r.add("DEBUG", f, a...) }
func (r *recorder) Infof(f string, a ...any)  { r.add("INFO", f, a...) }
func (r *recorder) Errorf(f string, a ...any) { r.add("ERROR", f, a...) }
func (r *recorder) RecordStart(name string)   { r.add("START", "%s", name) }

// count returns how many events match level and contain text.
func (r *recorder) count(level, text string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.level == level && strings.Contains(e.text, text) {
			n++
		}
	}
	return n
}

// await blocks until n events match level and text, failing the test
// after bound.
func (r *recorder) await(t *testing.T, n int, level, text string) {
	t.Helper()
	deadline := time.After(bound)
	for {
		r.mu.Lock()
		wake := r.wake
		r.mu.Unlock()
		if r.count(level, text) >= n {
			return
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no %d× %s %q within %v; events:\n%s", n, level, text, bound, r.dump())
		}
	}
}

func (r *recorder) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "%s %s\n", e.level, e.text)
	}
	return b.String()
}

// startEngine runs a real dependency engine on a test clock with the
// manifolds installed, and stops it when the test ends.
func startEngine(t *testing.T, manifolds dependency.Manifolds) (*dependency.Engine, *testclock.Clock, *recorder) {
	t.Helper()
	clk := testclock.NewClock(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	engine, rec := newEngine(t, clk)
	t.Cleanup(func() {
		engine.Kill()
		assert.NoError(t, engine.Wait())
	})
	require.NoError(t, dependency.Install(engine, manifolds))
	return engine, clk, rec
}

// newEngine makes a real dependency engine on clk that never gives up and
// reports its logs and metrics to the returned recorder.
func newEngine(t *testing.T, clk *testclock.Clock) (*dependency.Engine, *recorder) {
	t.Helper()
	rec := newRecorder()
	engine, err := dependency.NewEngine(dependency.EngineConfig{
		IsFatal:    func(error) bool { return false },
		WorstError: func(err, _ error) error { return err },
		ErrorDelay: errorDelay,
		Clock:      clk,
		Metrics:    rec,
		Logger:     rec,
	})
	require.NoError(t, err)
	return engine, rec
}

// idle is a worker that runs until killed.
type idle struct {
	kill chan struct{}
	once sync.Once
}

func newIdle() *idle           { return &idle{kill: make(chan struct{})} }
func (w *idle) Kill()          { w.once.Do(func() { close(w.kill) }) }
func (w *idle) Wait() error    { <-w.kill; return nil }
func (w *idle) String() string { return "idle" }

// userManifold is a user's own manifold (an API server, say) that counts
// how often its Start ran.
type userManifold struct {
	mu     sync.Mutex
	starts int
}

func (u *userManifold) manifold(inputs ...string) dependency.Manifold {
	return dependency.Manifold{
		Inputs: inputs,
		Start: func(context.Context, dependency.Getter) (worker.Worker, error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.starts++
			return newIdle(), nil
		},
	}
}

func (u *userManifold) started() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.starts
}

// manifoldReport returns the engine's report on one manifoldv5.
func manifoldReport(t *testing.T, engine *dependency.Engine, name string) map[string]any {
	t.Helper()
	all, ok := engine.Report(context.Background())[dependency.KeyManifolds].(map[string]any)
	require.True(t, ok)
	r, ok := all[name].(map[string]any)
	require.True(t, ok, "no manifold %q in the report", name)
	return r
}

func TestLockOutputsToJujuInterfaces(t *testing.T) {
	l := gate.New("upgrade-steps")
	got := make(chan error, 1)
	startEngine(t, dependency.Manifolds{
		"upgrade-steps-gate": manifoldv5.Lock(l),
		"consumer": {
			Inputs: []string{"upgrade-steps-gate"},
			Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
				var (
					w    jujuWaiter
					u    jujuUnlocker
					lock *gate.Lock
					gw   gate.Waiter
				)
				for _, out := range []any{&w, &u, &lock, &gw} {
					if err := get.Get("upgrade-steps-gate", out); err != nil {
						return nil, err
					}
				}
				var wrong string
				err := get.Get("upgrade-steps-gate", &wrong)
				switch {
				case w != l || u != l || lock != l || gw != l:
					got <- fmt.Errorf("handed out something else: %v %v %v %v", w, u, lock, gw)
				case err == nil:
					got <- errors.New("a *string was accepted")
				default:
					got <- nil
				}
				return newIdle(), nil
			},
		},
	})
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(bound):
		t.Fatal("consumer never started")
	}
}

func TestLockNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, "manifoldv5.Lock: nil *gate.Lock", func() { manifoldv5.Lock(nil) })
}

// The whole point: a gated manifold starts once the gate opens, exactly
// once, and never before; the flag bounces without an ERROR.
func TestGatedStartsOnceAfterUnlock(t *testing.T) {
	l := gate.New("upgrade-steps")
	var api userManifold
	engine, _, rec := startEngine(t, dependency.Manifolds{
		"upgrade-steps-gate": manifoldv5.Lock(l),
		"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
		"api-server":         manifoldv5.Gated(api.manifold(), "upgrade-steps-flag"),
	})

	// The flag is up with Check() false, and the API server was refused.
	rec.await(t, 1, "START", "upgrade-steps-flag")
	rec.await(t, 1, "TRACE", `"api-server" manifold worker failed to start: flag "upgrade-steps-flag" is not set`)
	assert.Equal(t, 0, api.started(), "started before the gate opened")
	r := manifoldReport(t, engine, "upgrade-steps-gate")[dependency.KeyReport].(map[string]any)
	assert.Equal(t, "locked", r["state"])

	l.Unlock()
	rec.await(t, 1, "START", "api-server")
	assert.Equal(t, 1, api.started())
	assert.Equal(t, 2, rec.count("START", "upgrade-steps-flag"), "the flag bounced once")
	assert.Equal(t, 0, rec.count("ERROR", ""), rec.dump())
	// The report is read through the engine's loop, after every event
	// above: no second start is pending.
	assert.Equal(t, "started", manifoldReport(t, engine, "api-server")[dependency.KeyState])
	assert.Equal(t, 1, api.started(), "started more than once")
}

func TestGatedOnAnOpenGateStartsAtOnce(t *testing.T) {
	l := gate.New("upgrade-steps")
	l.Unlock()
	var api userManifold
	_, _, rec := startEngine(t, dependency.Manifolds{
		"upgrade-steps-gate": manifoldv5.Lock(l),
		"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
		"api-server":         manifoldv5.Gated(api.manifold(), "upgrade-steps-flag"),
	})
	rec.await(t, 1, "START", "api-server")
	assert.Equal(t, 1, rec.count("START", "upgrade-steps-flag"), "no bounce: the flag started true")
}

// A gate that fails must be reported once and then stay put: one ERROR,
// the cause in the engine's report, no restart loop, its dependents never
// started, and the rest of the engine running on.
func TestFailedGateIsReportedOnceAndNeverLoops(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failFirst bool // fail the gate before the engine starts
	}{
		{name: "fails while the flag runs"},
		{name: "failed before the engine started", failFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := gate.New("upgrade-steps")
			cause := errors.New("step 3: schema migration failed")
			if tc.failFirst {
				l.Fail(cause)
			}
			var api, other userManifold
			engine, clk, rec := startEngine(t, dependency.Manifolds{
				"upgrade-steps-gate": manifoldv5.Lock(l),
				"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
				"api-server":         manifoldv5.Gated(api.manifold(), "upgrade-steps-flag"),
				"other":              other.manifold(),
			})
			if !tc.failFirst {
				rec.await(t, 1, "START", "upgrade-steps-flag")
				l.Fail(cause)
			}

			// Once: an ERROR naming the gate and its cause, and one
			// restart of the flag after ErrorDelay...
			rec.await(t, 1, "ERROR", `"upgrade-steps-flag" manifold worker returned unexpected error: gate "upgrade-steps" failed: step 3`)
			require.NoError(t, clk.WaitAdvance(2*errorDelay, bound, 1))
			// ...which settles: a missing dependency, not a fault.
			rec.await(t, 1, "TRACE", `"upgrade-steps-flag" manifold worker failed to start: gate "upgrade-steps" failed: step 3`)

			// No loop: nothing is waiting for the clock, however far it
			// moves. (A loop would arm an ErrorDelay timer after each
			// failure; the short real wait cannot fail a correct engine.)
			for range 5 {
				assert.Error(t, clk.WaitAdvance(errorDelay, 20*time.Millisecond, 1), "a restart is pending")
			}
			clk.Advance(100 * errorDelay)

			rec.await(t, 1, "START", "other")
			flag := manifoldReport(t, engine, "upgrade-steps-flag")
			assert.Equal(t, "stopped", flag[dependency.KeyState])
			assert.Equal(t, `gate "upgrade-steps" failed: step 3: schema migration failed`, flag[dependency.KeyError])
			lock := manifoldReport(t, engine, "upgrade-steps-gate")[dependency.KeyReport].(map[string]any)
			assert.Equal(t, "failed", lock["state"])
			assert.Equal(t, "step 3: schema migration failed", lock["error"])
			assert.Equal(t, "started", manifoldReport(t, engine, "other")[dependency.KeyState], "the rest of the engine runs on")
			assert.Equal(t, 1, other.started())

			assert.Equal(t, 1, rec.count("ERROR", ""), rec.dump())
			assert.Equal(t, 0, api.started(), "a dependent of a failed gate started")
			assert.Equal(t, 0, rec.count("START", "api-server"))
			assert.LessOrEqual(t, rec.count("START", "upgrade-steps-flag"), 1)
		})
	}
}

// A flag's output is any interface a *gate.Flag satisfies, juju's
// engine.Flag included, so juju code that checks flags itself works.
func TestFlagOutput(t *testing.T) {
	l := gate.New("upgrade-steps")
	got := make(chan []bool, 2)
	_, _, rec := startEngine(t, dependency.Manifolds{
		"upgrade-steps-gate": manifoldv5.Lock(l),
		"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
		"checker": {
			Inputs: []string{"upgrade-steps-flag"},
			Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
				var (
					jf jujuFlag
					gf *gate.Flag
				)
				if err := get.Get("upgrade-steps-flag", &jf); err != nil {
					return nil, err
				}
				if err := get.Get("upgrade-steps-flag", &gf); err != nil {
					return nil, err
				}
				var wrong jujuWaiter
				wrongErr := get.Get("upgrade-steps-flag", &wrong)
				got <- []bool{jf.Check(), gf.Check(), wrongErr != nil}
				return newIdle(), nil
			},
		},
	})
	rec.await(t, 1, "START", "checker")
	l.Unlock()
	rec.await(t, 2, "START", "checker")
	assert.Equal(t, []bool{false, false, true}, <-got)
	assert.Equal(t, []bool{true, true, true}, <-got)
}

// Gated keeps what m was: its inputs (with the flags added once), its
// Output and its Filter, which the engine still applies.
func TestGatedKeepsOutputAndFilter(t *testing.T) {
	errDone := errors.New("done")
	served := make(chan string, 1)
	inner := dependency.Manifold{
		Inputs: []string{"upgrade-steps-flag"},
		Start: func(context.Context, dependency.Getter) (worker.Worker, error) {
			return newIdle(), nil
		},
		Output: func(in worker.Worker, out any) error {
			p, ok := out.(*fmt.Stringer)
			if !ok {
				return errors.New("want a *fmt.Stringer")
			}
			*p = in.(*idle)
			return nil
		},
		Filter: func(err error) error {
			if errors.Is(err, errDone) {
				return dependency.ErrUninstall
			}
			return err
		},
	}
	gated := manifoldv5.Gated(inner, "upgrade-steps-flag", "upgrade-steps-flag")
	assert.Equal(t, []string{"upgrade-steps-flag"}, gated.Inputs, "a flag already among the inputs is not added twice")
	assert.Equal(t, []string{"upgrade-steps-flag"}, inner.Inputs, "m itself is not changed")
	assert.ErrorIs(t, gated.Filter(errDone), dependency.ErrUninstall)

	l := gate.New("upgrade-steps")
	l.Unlock()
	_, _, rec := startEngine(t, dependency.Manifolds{
		"upgrade-steps-gate": manifoldv5.Lock(l),
		"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
		"api-server":         gated,
		"client": {
			Inputs: []string{"api-server"},
			Start: func(_ context.Context, get dependency.Getter) (worker.Worker, error) {
				var s fmt.Stringer
				if err := get.Get("api-server", &s); err != nil {
					return nil, err
				}
				served <- s.String()
				return newIdle(), nil
			},
		},
	})
	rec.await(t, 1, "START", "client")
	assert.Equal(t, "idle", <-served)
}

// Killing the engine stops every worker the three manifolds started, in
// every state a gate can be in; goleak checks that none is left.
func TestEngineShutdownLeavesNoGoroutines(t *testing.T) {
	for _, state := range []string{"locked", "unlocked", "failed"} {
		t.Run(state, func(t *testing.T) {
			l := gate.New("upgrade-steps")
			var api userManifold
			engine, rec := newEngine(t, testclock.NewClock(time.Time{}))
			require.NoError(t, dependency.Install(engine, dependency.Manifolds{
				"upgrade-steps-gate": manifoldv5.Lock(l),
				"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
				"api-server":         manifoldv5.Gated(api.manifold(), "upgrade-steps-flag"),
			}))
			rec.await(t, 1, "START", "upgrade-steps-flag")
			switch state {
			case "unlocked":
				l.Unlock()
				rec.await(t, 1, "START", "api-server")
			case "failed":
				l.Fail(errors.New("boom"))
				rec.await(t, 1, "ERROR", "boom")
			}
			assert.NoError(t, worker.Stop(engine))
			goleak.VerifyNone(t)
		})
	}
}
