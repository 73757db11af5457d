// Package enginetest is the test kit of gate/manifold and gate/manifoldv5:
// an adapter's test describes its engine with an Adapter and calls Run,
// which checks every promise of its manifolds in a real engine.
package enginetest

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock"
	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
)

// Adapter is the adapter under test, in its engine's types: M is its
// version's dependency.Manifold.
type Adapter[M any] struct {
	// Pkg is the adapter's package name, as its panics say it.
	Pkg string
	// Lock, Flag and Gated are the adapter's; LockOn(clk, l) is
	// Config{Clock: clk}.Lock(l).
	Lock   func(*gate.Lock) M
	LockOn func(clock.Clock, *gate.Lock) M
	Flag   func(lockName string) M
	Gated  func(m M, flags ...string) M
	// Manifold is a user's manifold as a dependency.Manifold; Inputs and
	// Filter read a dependency.Manifold's fields.
	Manifold func(Manifold) M
	Inputs   func(M) []string
	Filter   func(M) func(error) error
	// ErrUninstall is the engine's dependency.ErrUninstall.
	ErrUninstall error
	// NewEngine makes a real engine on clk that never gives up, restarts
	// a failed worker after errorDelay, and logs and records starts to
	// rec (its Logger and Metrics).
	NewEngine func(clk clock.Clock, errorDelay time.Duration, rec *Recorder) (Engine[M], error)
}

// Engine is a running engine of the adapter's version.
type Engine[M any] interface {
	Install(manifolds map[string]M) error
	// Report is the engine's report on the manifold named, if it has one.
	Report(name string) (ManifoldReport, bool)
	Kill()
	Wait() error
}

// ManifoldReport is the engine's report on one manifold: its
// dependency.KeyState, KeyError and KeyReport.
type ManifoldReport struct {
	State, Error, Report any
}

// Manifold is a user's manifold, in no engine's types: Start gets its
// inputs through get (dependency.Getter's Get).
type Manifold struct {
	Inputs []string
	Start  func(get func(name string, out any) error) (Worker, error)
	Output func(in Worker, out any) error
	Filter func(error) error
}

// Worker is juju's worker.Worker, in every version.
type Worker interface {
	Kill()
	Wait() error
}

// The method sets of juju's worker/gate Waiter and Unlocker and of juju's
// engine.Flag, declared here as a juju agent declares them: types the
// adapters have never heard of.
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

var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

// Run runs every test of the kit against a, each as a subtest.
func Run[M any](t *testing.T, a Adapter[M]) {
	for _, tc := range []struct {
		name string
		test func(kit[M], *testing.T)
	}{
		{"LockOutputsToJujuInterfaces", kit[M].lockOutputsToJujuInterfaces},
		{"LockNilPanics", kit[M].lockNilPanics},
		{"GatedStartsOnceAfterUnlock", kit[M].gatedStartsOnceAfterUnlock},
		{"GatedOnAnOpenGateStartsAtOnce", kit[M].gatedOnAnOpenGateStartsAtOnce},
		{"FailedGateIsReportedOnceAndNeverLoops", kit[M].failedGateIsReportedOnceAndNeverLoops},
		{"FlagOutput", kit[M].flagOutput},
		{"GatedKeepsOutputAndFilter", kit[M].gatedKeepsOutputAndFilter},
		{"EngineShutdownLeavesNoGoroutines", kit[M].engineShutdownLeavesNoGoroutines},
		{"WorkersReportStateSinceAndCause", kit[M].workersReportStateSinceAndCause},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(kit[M]{a}, t) })
	}
}

type kit[M any] struct{ a Adapter[M] }

// startEngine runs a real engine on clk with the manifolds installed, and
// stops it when the test ends.
func (k kit[M]) startEngine(t *testing.T, clk *testclock.Clock, manifolds map[string]M) (Engine[M], *Recorder) {
	t.Helper()
	rec := newRecorder()
	engine, err := k.a.NewEngine(clk, errorDelay, rec)
	require.NoError(t, err)
	t.Cleanup(func() {
		engine.Kill()
		assert.NoError(t, engine.Wait())
	})
	require.NoError(t, engine.Install(manifolds))
	return engine, rec
}

func report[M any](t *testing.T, engine Engine[M], name string) ManifoldReport {
	t.Helper()
	r, ok := engine.Report(name)
	require.True(t, ok, "no manifold %q in the report", name)
	return r
}

func workerReport[M any](t *testing.T, engine Engine[M], name string) map[string]any {
	t.Helper()
	r, ok := report(t, engine, name).Report.(map[string]any)
	require.True(t, ok, "no worker report for %q", name)
	return r
}

// gatedAPI is the kit's usual engine: l's lock manifold, its flag, api's
// manifold gated on the flag (if api is not nil), and more.
func (k kit[M]) gatedAPI(l *gate.Lock, api *user, more map[string]M) map[string]M {
	m := map[string]M{
		"upgrade-steps-gate": k.a.Lock(l),
		"upgrade-steps-flag": k.a.Flag("upgrade-steps-gate"),
	}
	if api != nil {
		m["api-server"] = k.a.Gated(k.a.Manifold(api.manifold()), "upgrade-steps-flag")
	}
	maps.Copy(m, more)
	return m
}

// user is a user's own manifold (an API server, say) that counts how often
// its Start ran.
type user struct{ starts atomic.Int32 }

func (u *user) manifold(inputs ...string) Manifold {
	return Manifold{
		Inputs: inputs,
		Start: func(func(string, any) error) (Worker, error) {
			u.starts.Add(1)
			return newIdle(), nil
		},
	}
}

func (u *user) started() int { return int(u.starts.Load()) }

// idle is a worker that runs until killed.
type idle struct {
	kill chan struct{}
	once sync.Once
}

func newIdle() *idle           { return &idle{kill: make(chan struct{})} }
func (w *idle) Kill()          { w.once.Do(func() { close(w.kill) }) }
func (w *idle) Wait() error    { <-w.kill; return nil }
func (w *idle) String() string { return "idle" }

func (k kit[M]) lockOutputsToJujuInterfaces(t *testing.T) {
	l := gate.New("upgrade-steps")
	got := make(chan error, 1)
	k.startEngine(t, testclock.NewClock(t0), map[string]M{
		"upgrade-steps-gate": k.a.Lock(l),
		"consumer": k.a.Manifold(Manifold{
			Inputs: []string{"upgrade-steps-gate"},
			Start: func(get func(string, any) error) (Worker, error) {
				var (
					w    jujuWaiter
					u    jujuUnlocker
					lock *gate.Lock
					gw   gate.Waiter
				)
				for _, out := range []any{&w, &u, &lock, &gw} {
					if err := get("upgrade-steps-gate", out); err != nil {
						return nil, err
					}
				}
				var wrong string
				err := get("upgrade-steps-gate", &wrong)
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
		}),
	})
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(bound):
		t.Fatal("consumer never started")
	}
}

func (k kit[M]) lockNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, k.a.Pkg+".Lock: nil *gate.Lock", func() { k.a.Lock(nil) })
}

// The whole point: a gated manifold starts once the gate opens, exactly
// once, and never before; the flag bounces without an ERROR.
func (k kit[M]) gatedStartsOnceAfterUnlock(t *testing.T) {
	l := gate.New("upgrade-steps")
	var api user
	engine, rec := k.startEngine(t, testclock.NewClock(t0), k.gatedAPI(l, &api, nil))

	// The flag is up with Check() false, and the API server was refused.
	rec.await(t, 1, "START", "upgrade-steps-flag")
	rec.await(t, 1, "TRACE", `"api-server" manifold worker failed to start: flag "upgrade-steps-flag" is not set`)
	assert.Equal(t, 0, api.started(), "started before the gate opened")
	assert.Equal(t, "locked", workerReport(t, engine, "upgrade-steps-gate")["state"])

	l.Unlock()
	rec.await(t, 1, "START", "api-server")
	assert.Equal(t, 1, api.started())
	assert.Equal(t, 2, rec.count("START", "upgrade-steps-flag"), "the flag bounced once")
	assert.Equal(t, 0, rec.count("ERROR", ""), rec.dump())
	// The report is read through the engine's loop, after every event
	// above: no second start is pending.
	assert.Equal(t, "started", report(t, engine, "api-server").State)
	assert.Equal(t, 1, api.started(), "started more than once")
}

func (k kit[M]) gatedOnAnOpenGateStartsAtOnce(t *testing.T) {
	l := gate.New("upgrade-steps")
	l.Unlock()
	var api user
	_, rec := k.startEngine(t, testclock.NewClock(t0), k.gatedAPI(l, &api, nil))
	rec.await(t, 1, "START", "api-server")
	assert.Equal(t, 1, rec.count("START", "upgrade-steps-flag"), "no bounce: the flag started true")
}

// A gate that fails must be reported once and then stay put: one ERROR,
// the cause in the engine's report, no restart loop, its dependents never
// started, and the rest of the engine running on.
func (k kit[M]) failedGateIsReportedOnceAndNeverLoops(t *testing.T) {
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
			var api, other user
			clk := testclock.NewClock(t0)
			engine, rec := k.startEngine(t, clk, k.gatedAPI(l, &api, map[string]M{"other": k.a.Manifold(other.manifold())}))
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
			flag := report(t, engine, "upgrade-steps-flag")
			assert.Equal(t, "stopped", flag.State)
			assert.Equal(t, `gate "upgrade-steps" failed: step 3: schema migration failed`, flag.Error)
			lock := workerReport(t, engine, "upgrade-steps-gate")
			assert.Equal(t, "failed", lock["state"])
			assert.Equal(t, "step 3: schema migration failed", lock["error"])
			assert.Equal(t, "started", report(t, engine, "other").State, "the rest of the engine runs on")
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
func (k kit[M]) flagOutput(t *testing.T) {
	l := gate.New("upgrade-steps")
	got := make(chan []bool, 2)
	_, rec := k.startEngine(t, testclock.NewClock(t0), k.gatedAPI(l, nil, map[string]M{
		"checker": k.a.Manifold(Manifold{
			Inputs: []string{"upgrade-steps-flag"},
			Start: func(get func(string, any) error) (Worker, error) {
				var (
					jf jujuFlag
					gf *gate.Flag
				)
				for _, out := range []any{&jf, &gf} {
					if err := get("upgrade-steps-flag", out); err != nil {
						return nil, err
					}
				}
				var wrong jujuWaiter
				wrongErr := get("upgrade-steps-flag", &wrong)
				got <- []bool{jf.Check(), gf.Check(), wrongErr != nil}
				return newIdle(), nil
			},
		}),
	}))
	rec.await(t, 1, "START", "checker")
	l.Unlock()
	rec.await(t, 2, "START", "checker")
	assert.Equal(t, []bool{false, false, true}, <-got)
	assert.Equal(t, []bool{true, true, true}, <-got)
}

// Gated keeps what m was: its inputs (with the flags added once), its
// Output and its Filter, which the engine still applies.
func (k kit[M]) gatedKeepsOutputAndFilter(t *testing.T) {
	errDone := errors.New("done")
	served := make(chan string, 1)
	inner := k.a.Manifold(Manifold{
		Inputs: []string{"upgrade-steps-flag"},
		Start:  func(func(string, any) error) (Worker, error) { return newIdle(), nil },
		Output: func(in Worker, out any) error {
			p, ok := out.(*fmt.Stringer)
			if !ok {
				return errors.New("want a *fmt.Stringer")
			}
			*p = in.(*idle)
			return nil
		},
		Filter: func(err error) error {
			if errors.Is(err, errDone) {
				return k.a.ErrUninstall
			}
			return err
		},
	})
	gated := k.a.Gated(inner, "upgrade-steps-flag", "upgrade-steps-flag")
	assert.Equal(t, []string{"upgrade-steps-flag"}, k.a.Inputs(gated), "a flag already among the inputs is not added twice")
	assert.Equal(t, []string{"upgrade-steps-flag"}, k.a.Inputs(inner), "m itself is not changed")
	assert.ErrorIs(t, k.a.Filter(gated)(errDone), k.a.ErrUninstall)

	l := gate.New("upgrade-steps")
	l.Unlock()
	_, rec := k.startEngine(t, testclock.NewClock(t0), k.gatedAPI(l, nil, map[string]M{
		"api-server": gated,
		"client": k.a.Manifold(Manifold{
			Inputs: []string{"api-server"},
			Start: func(get func(string, any) error) (Worker, error) {
				var s fmt.Stringer
				if err := get("api-server", &s); err != nil {
					return nil, err
				}
				served <- s.String()
				return newIdle(), nil
			},
		}),
	}))
	rec.await(t, 1, "START", "client")
	assert.Equal(t, "idle", <-served)
}

// Killing the engine stops every worker the three manifolds started, in
// every state a gate can be in; goleak checks that none is left.
func (k kit[M]) engineShutdownLeavesNoGoroutines(t *testing.T) {
	for _, state := range []string{"locked", "unlocked", "failed"} {
		t.Run(state, func(t *testing.T) {
			l := gate.New("upgrade-steps")
			var api user
			engine, rec := k.startEngine(t, testclock.NewClock(time.Time{}), k.gatedAPI(l, &api, nil))
			rec.await(t, 1, "START", "upgrade-steps-flag")
			switch state {
			case "unlocked":
				l.Unlock()
				rec.await(t, 1, "START", "api-server")
			case "failed":
				l.Fail(errors.New("boom"))
				rec.await(t, 1, "ERROR", "boom")
			}
			engine.Kill()
			assert.NoError(t, engine.Wait())
			goleak.VerifyNone(t)
		})
	}
}

// since formats t as the engine formats its own "started".
func since(t time.Time) string { return t.Format("2006-01-02 15:04:05") }

// What juju_engine_report shows an operator: each gate's state, since when,
// and the cause of a failure (gate/DESIGN.md, "Engine report").
func (k kit[M]) workersReportStateSinceAndCause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resolve func(*gate.Lock)
		state   string
		cause   any
	}{
		{name: "unlocked", resolve: (*gate.Lock).Unlock, state: "unlocked"},
		{name: "failed", resolve: func(l *gate.Lock) { l.Fail(errors.New("step 3: schema migration failed")) },
			state: "failed", cause: "step 3: schema migration failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.NewClock(t0)
			l := gate.New("upgrade-steps")
			engine, rec := k.startEngine(t, clk, k.gatedAPI(l, nil, map[string]M{"upgrade-steps-gate": k.a.LockOn(clk, l)}))
			rec.await(t, 1, "START", "upgrade-steps-flag")
			locked := map[string]any{"gate": "upgrade-steps", "state": "locked", "since": since(t0)}
			assert.Equal(t, locked, workerReport(t, engine, "upgrade-steps-gate"))
			locked["check"] = false
			assert.Equal(t, locked, workerReport(t, engine, "upgrade-steps-flag"))

			clk.Advance(3 * time.Second)
			tc.resolve(l)
			want := map[string]any{"gate": "upgrade-steps", "state": tc.state, "since": since(t0.Add(3 * time.Second))}
			if tc.cause != nil {
				want["error"] = tc.cause
				rec.await(t, 1, "ERROR", "schema migration failed")
			} else {
				rec.await(t, 2, "START", "upgrade-steps-flag")
				flag := workerReport(t, engine, "upgrade-steps-flag")
				assert.Equal(t, true, flag["check"], "the bounced flag checked true")
				assert.Equal(t, want["since"], flag["since"])
			}
			assert.Equal(t, want, workerReport(t, engine, "upgrade-steps-gate"))
			clk.Advance(time.Minute)
			assert.Equal(t, want, workerReport(t, engine, "upgrade-steps-gate"), "since stays when it happened")
		})
	}
}

// event is one thing the engine did: a log line at a level, or a start.
type event struct {
	level string // TRACE, DEBUG, INFO, ERROR or START
	text  string
}

// Recorder is the engine's Logger and Metrics: it keeps every event and
// lets a test wait for one, so that nothing waits by sleeping.
type Recorder struct {
	mu     sync.Mutex
	events []event
	wake   chan struct{} // closed and replaced on every event
}

func newRecorder() *Recorder { return &Recorder{wake: make(chan struct{})} }

func (r *Recorder) add(level, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{level, fmt.Sprintf(format, args...)})
	close(r.wake)
	r.wake = make(chan struct{})
}

// The engine's Logger and Metrics.
func (r *Recorder) Tracef(f string, a ...any) { r.add("TRACE", f, a...) }
func (r *Recorder) Debugf(f string, a ...any) { r.add("DEBUG", f, a...) }
func (r *Recorder) Infof(f string, a ...any)  { r.add("INFO", f, a...) }
func (r *Recorder) Errorf(f string, a ...any) { r.add("ERROR", f, a...) }
func (r *Recorder) RecordStart(name string)   { r.add("START", "%s", name) }

func (r *Recorder) count(level, text string) int {
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
func (r *Recorder) await(t *testing.T, n int, level, text string) {
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

func (r *Recorder) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "%s %s\n", e.level, e.text)
	}
	return b.String()
}
