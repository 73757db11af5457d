package boardview_test

import (
	"context"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// add puts a new gate named name on b.
func add(b *gate.Board, name string) *gate.Lock {
	l := gate.New(name)
	b.Add(name, l)
	return l
}

// put puts l on b under its own name.
func put(b *gate.Board, l *gate.Lock) { b.Add(l.Name(), l) }

// chanWaiter is a foreign Waiter: open once its channel is closed.
type chanWaiter chan struct{}

func (c chanWaiter) Unlocked() <-chan struct{} { return c }
func (c chanWaiter) IsUnlocked() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// controllerBoard is a controller's startup on a board, on a test clock,
// taken @3s: the same board as gate's own timeline tests.
func controllerBoard(t *testing.T, cfg gate.BoardConfig) (*gate.Board, *testclock.Clock) {
	t.Helper()
	clk := testclock.NewClock(t0)
	cfg.Clock = clk
	b := gate.NewBoard(cfg)
	metrics := add(b, "metrics")
	serving := add(b, "serving")
	selfDial := add(b, "self-dial").After(serving)
	lease := add(b, "lease")
	clk.Advance(100 * ms)
	upgrade := add(b, "upgrade").After(serving)
	stable := gate.AllOf("stable", serving, selfDial, upgrade, lease)
	put(b, stable)
	api := add(b, "api-port").After(stable)
	workers := add(b, "workers").After(api)

	step := func(at time.Duration, l *gate.Lock) {
		clk.Advance(t0.Add(at).Sub(clk.Now()))
		l.Unlock()
	}
	step(300*ms, metrics)
	step(800*ms, serving)
	step(1000*ms, selfDial)
	step(1500*ms, lease)
	step(2000*ms, upgrade)
	require.True(t, stable.IsUnlocked())
	step(2100*ms, api)
	step(2500*ms, workers)
	clk.Advance(500 * ms) // taken @3s
	return b, clk
}

// bounded is a context that ends the test's wait after 10s rather than
// hang it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
