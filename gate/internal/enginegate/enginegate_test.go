package enginegate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/internal/enginegate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0         = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	errMissing = errors.New("dependency not available")
)

// The core alone, on a test clock; the adapters' tests run it in juju's
// real engines.
func TestLockReportsStateSinceAndCause(t *testing.T) {
	clk := testclock.NewClock(t0)
	l := gate.New("upgrade-steps")
	w := enginegate.NewLock(l, clk, errMissing)
	defer func() { w.Kill(); assert.NoError(t, w.Wait()) }()
	assert.Equal(t, map[string]any{"gate": "upgrade-steps", "state": "locked", "since": "2026-11-30 01:00:00"}, w.Report())

	f, err := enginegate.StartFlag(w)
	require.NoError(t, err)
	assert.Equal(t, false, f.Report()["check"])

	clk.Advance(3 * time.Second)
	cause := errors.New("step 3: schema migration failed")
	l.Fail(cause)
	failed := map[string]any{"gate": "upgrade-steps", "state": "failed", "since": "2026-11-30 01:00:03", "error": cause.Error()}
	assert.Equal(t, failed, w.Report())
	clk.Advance(time.Minute)
	assert.Equal(t, failed, w.Report(), "since stays when it happened")

	// The first flag to see the failure ends with it (one ERROR in an
	// engine); the next start settles into a missing dependency.
	first := f.Wait()
	assert.ErrorIs(t, first, cause)
	assert.NotErrorIs(t, first, errMissing)
	assert.Equal(t, first, f.Wait(), "every Wait returns the same")
	_, err = enginegate.StartFlag(w)
	assert.ErrorIs(t, err, errMissing)
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, gate.ErrFailed)
}

// "since" is UTC, as juju's engine writes KeyLastStart
// (Clock.Now().UTC()), whatever the clock's location: both read alike.
func TestLockReportsSinceInUTC(t *testing.T) {
	east := time.FixedZone("UTC+5", 5*60*60)
	w := enginegate.NewLock(gate.New("upgrade-steps"), testclock.NewClock(t0.In(east)), errMissing)
	defer func() { w.Kill(); assert.NoError(t, w.Wait()) }()
	assert.Equal(t, "2026-11-30 01:00:00", w.Report()["since"])
}

func TestBounce(t *testing.T) {
	errBounce := errors.New("bounce")
	assert.Equal(t, errBounce, enginegate.Bounce(gate.ErrUnlocked, errBounce))
	other := errors.New("other")
	assert.Equal(t, other, enginegate.Bounce(other, errBounce))
}
