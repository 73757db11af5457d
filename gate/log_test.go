package gate_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
)

// capture is a slog.Handler that keeps every record, for tests to read.
type capture struct {
	mu      sync.Mutex
	records []logRecord
	// during, if set, runs inside Handle: what a handler that itself reads
	// the board would do.
	during func()
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler       { panic("the board adds no attrs to its logger") }
func (c *capture) WithGroup(string) slog.Handler            { panic("the board opens no groups") }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value
		return true
	})
	if c.during != nil {
		c.during()
	}
	c.mu.Lock()
	c.records = append(c.records, rec)
	c.mu.Unlock()
	return nil
}

func (c *capture) all() []logRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]logRecord(nil), c.records...)
}

func TestBoardLogsEachGateOpenedOrFailedOnce(t *testing.T) {
	logs := &capture{}
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk, Logger: slog.New(logs)})
	port, lease := add(b, "controller-port"), add(b, "lease")
	stable := gate.AllOf("stable", port, lease)
	put(b, stable)
	clk.Advance(800 * ms)
	port.Unlock()
	port.Unlock() // a no-op: no second record
	clk.Advance(700 * ms)
	lease.Fail(errors.New("no quorum"))

	// Waiting on and asking about gates logs nothing.
	require.Error(t, gate.Wait(context.Background(), stable))
	assert.True(t, port.IsUnlocked())
	b.Report()
	b.Timeline()

	recs := logs.all()
	require.Len(t, recs, 3)
	assert.Equal(t, logRecord{slog.LevelInfo, "gate opened", map[string]slog.Value{
		"gate": slog.StringValue("controller-port"), "waited": slog.DurationValue(800 * ms),
	}}, recs[0])
	assert.Equal(t, slog.LevelWarn, recs[1].level, "a failure is a warning: startup will not finish")
	assert.Equal(t, "gate failed", recs[1].msg)
	assert.Equal(t, "lease", recs[1].attrs["gate"].String())
	assert.Equal(t, 1500*ms, recs[1].attrs["waited"].Duration())
	assert.Equal(t, "no quorum", recs[1].attrs["err"].Any().(error).Error(), "the cause, not the gate's own wrapping")
	assert.Equal(t, "stable", recs[2].attrs["gate"].String())
	assert.Equal(t, slog.LevelWarn, recs[2].level)
	assert.Contains(t, recs[2].attrs["err"].Any().(error).Error(), "no quorum")
	assert.Len(t, recs[2].attrs, 3)
}

// A Waiter that is not a *Lock is seen open only when the board looks: its
// record comes with the first report or timeline that saw it, once.
func TestBoardLogsAnAddedWaiterWhenItFirstSeesItOpen(t *testing.T) {
	logs := &capture{}
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk, Logger: slog.New(logs)})
	open := &openable{ch: make(chan struct{})}
	b.Add("foreign", open)
	close(open.ch)
	assert.Empty(t, logs.all(), "nothing has looked yet")
	clk.Advance(2 * time.Second)
	b.Timeline()
	b.Report()
	recs := logs.all()
	require.Len(t, recs, 1)
	assert.Equal(t, "gate opened", recs[0].msg)
	assert.Equal(t, 2*time.Second, recs[0].attrs["waited"].Duration())
}

// openable is a Waiter that is not a *Lock.
type openable struct{ ch chan struct{} }

func (o *openable) Unlocked() <-chan struct{} { return o.ch }
func (o *openable) IsUnlocked() bool {
	select {
	case <-o.ch:
		return true
	default:
		return false
	}
}

// A handler may itself read the board (a status page's logger adding the
// board's summary): the board must not hold its lock while it logs.
func TestBoardLogsWithItsLockReleased(t *testing.T) {
	logs := &capture{}
	b := gate.NewBoard(gate.BoardConfig{Logger: slog.New(logs)})
	logs.during = func() { _ = b.Report().String() }
	l := add(b, "controller-port")
	open := &openable{ch: make(chan struct{})}
	b.Add("foreign", open)
	close(open.ch)

	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Unlock() // logged from the unlocking goroutine's hook
		b.Report() // logs foreign, from inside Report
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a deadlock bound, not a speed assertion
		t.Fatal("the board deadlocked logging with its lock held")
	}
	assert.Len(t, logs.all(), 2)
}

func TestBoardWithoutALoggerLogsNothing(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	add(b, "x").Unlock()
	add(b, "y").Fail(errors.New("no"))
	assert.Len(t, b.Report(), 2) // and nothing panicked
}
