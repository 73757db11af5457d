package gate_test

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A drain turns readiness false first: the first report after Drain
// closes has the locked "draining" entry, whether or not the board's own
// goroutine has seen Drain yet, and Draining is closed by then.
func TestDrainIsNotReadyInTheFirstReportAfterIt(t *testing.T) {
	for range 50 { // the report races the board's goroutine: either may start the drain
		drain := make(chan struct{})
		b := gate.NewBoard(gate.BoardConfig{Drain: drain})
		add(b, "serving").Unlock()
		require.False(t, closed(b.Draining()))
		close(drain)
		r := b.Report()
		require.Len(t, r, 2)
		assert.Equal(t, "draining", r[1].Name)
		assert.Equal(t, gate.StateLocked, r[1].State)
		assert.True(t, closed(b.Draining()), "Draining open after a report showed the drain")
		require.NoError(t, b.Close())
	}
}

// The drain and its steps are on the startup's timeline, after it: the
// draining entry stays locked (the board is never ready again), the steps
// the caller adds open as the stop proceeds, and each step is logged as a
// startup entry is, the drain's start once.
func TestDrainStepsAreOnTheSameTimeline(t *testing.T) {
	clk := testclock.NewClock(t0)
	logs := logtest.New()
	drain := make(chan struct{})
	b := gate.NewBoard(gate.BoardConfig{Clock: clk, Logger: logs.Logger(), Drain: drain})
	clk.Advance(time.Second)
	add(b, "serving").Unlock()
	clk.Advance(9 * time.Second)

	close(drain)
	select {
	case <-b.Draining(): // the board's goroutine, with no report to start it
	case <-time.After(5 * time.Second): // a bound on a broken test, never waited out
		t.Fatal("Draining not closed")
	}
	grace := add(b, "grace over")
	calls := add(b, "calls finished").After(grace)
	clk.Advance(2 * time.Second)
	grace.Unlock()
	clk.Advance(500 * time.Millisecond)
	calls.Unlock()
	b.Report() // a second look starts nothing

	tl := b.Timeline()
	require.Len(t, tl.Entries, 4)
	d := tl.Entries[1]
	assert.Equal(t, "draining", d.Name)
	assert.Equal(t, gate.StateLocked, d.State)
	assert.Equal(t, 10*time.Second, d.Added)
	assert.Equal(t, 12500*time.Millisecond, d.Ended) // locked: ends now
	assert.Equal(t, 12*time.Second, tl.Entries[2].Ended)
	assert.Equal(t, 12500*time.Millisecond, tl.Entries[3].Ended)
	assert.Equal(t, "waiting on draining (2.5s); 3 open", b.Report().String())

	require.NoError(t, b.Close())
	logs.Seal(t)
	started := logs.Matching("drain started")
	require.Len(t, started, 1)
	assert.Equal(t, slog.LevelInfo, started[0].Level)
	assert.Equal(t, "draining", started[0].Str("gate"))
	assert.Len(t, logs.Matching("gate opened"), 3)
}

// A board closed before its Drain closes never drains: no entry, no
// record, Draining stays open, and its goroutine has ended (goleak).
func TestDrainAfterCloseIsNothing(t *testing.T) {
	logs := logtest.New()
	drain := make(chan struct{})
	b := gate.NewBoard(gate.BoardConfig{Logger: logs.Logger(), Drain: drain})
	require.NoError(t, b.Close())
	logs.Seal(t)
	close(drain)
	add(b, "late")
	r := b.Report()
	require.Len(t, r, 1)
	assert.Equal(t, "late", r[0].Name)
	assert.False(t, closed(b.Draining()))
}

// A board without Drain never drains, and starts no goroutine.
func TestNoDrainNeverDrains(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	add(b, "serving").Unlock()
	assert.Len(t, b.Report(), 1)
	assert.False(t, closed(b.Draining()))
	require.NoError(t, b.Close())
}

// The drain's entry follows the board's rule for names: under a name the
// caller took already it is a failed duplicate, still never ready.
func TestDrainUnderATakenName(t *testing.T) {
	drain := make(chan struct{})
	b := gate.NewBoard(gate.BoardConfig{Drain: drain})
	defer b.Close()
	add(b, "draining").Unlock()
	close(drain)
	<-b.Draining()
	r := b.Report()
	require.Len(t, r, 2)
	assert.Equal(t, "draining (2)", r[1].Name)
	assert.Equal(t, gate.StateFailed, r[1].State)
	assert.True(t, errors.Is(r[1].Err, gate.ErrDuplicateName))
}

// A drain that starts as the board closes is logged before Close returns,
// or not at all.
func TestDrainRacingCloseLogsNothingAfterIt(t *testing.T) {
	for range 50 {
		logs := logtest.New()
		drain := make(chan struct{})
		b := gate.NewBoard(gate.BoardConfig{Logger: logs.Logger(), Drain: drain})
		var reported sync.WaitGroup
		reported.Add(1)
		go close(drain)
		go func() { defer reported.Done(); b.Report() }()
		require.NoError(t, b.Close())
		logs.Seal(t)
		reported.Wait()
	}
}
