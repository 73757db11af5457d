package manifoldv5_test

import (
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/juju/worker/v5/dependency"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/manifoldv5"
)

// since formats t as the engine formats its own "started".
func since(t time.Time) string { return t.Format("2006-01-02 15:04:05") }

// What juju_engine_report shows an operator: each gate's state, since when,
// and the cause of a failure, read through the real engine's Report.
// Before, the report said "locked" or "failed" with no time, and the flag
// said nothing at all.
func TestWorkersReportStateSinceAndCause(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
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
			engine, rec := newEngine(t, clk)
			t.Cleanup(func() {
				engine.Kill()
				assert.NoError(t, engine.Wait())
			})
			l := gate.New("upgrade-steps")
			require.NoError(t, dependency.Install(engine, dependency.Manifolds{
				"upgrade-steps-gate": manifoldv5.Config{Clock: clk}.Lock(l),
				"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
			}))
			rec.await(t, 1, "START", "upgrade-steps-flag")
			locked := map[string]any{"gate": "upgrade-steps", "state": "locked", "since": since(t0)}
			assert.Equal(t, locked, manifoldReport(t, engine, "upgrade-steps-gate")[dependency.KeyReport])
			locked["check"] = false
			assert.Equal(t, locked, manifoldReport(t, engine, "upgrade-steps-flag")[dependency.KeyReport])

			clk.Advance(3 * time.Second)
			tc.resolve(l)
			want := map[string]any{"gate": "upgrade-steps", "state": tc.state, "since": since(t0.Add(3 * time.Second))}
			if tc.cause != nil {
				want["error"] = tc.cause
				rec.await(t, 1, "ERROR", "schema migration failed")
			} else {
				rec.await(t, 2, "START", "upgrade-steps-flag")
				flag := manifoldReport(t, engine, "upgrade-steps-flag")[dependency.KeyReport].(map[string]any)
				assert.Equal(t, true, flag["check"], "the bounced flag checked true")
				assert.Equal(t, want["since"], flag["since"])
			}
			assert.Equal(t, want, manifoldReport(t, engine, "upgrade-steps-gate")[dependency.KeyReport])
			clk.Advance(time.Minute)
			assert.Equal(t, want, manifoldReport(t, engine, "upgrade-steps-gate")[dependency.KeyReport], "since stays when it happened")
		})
	}
}
