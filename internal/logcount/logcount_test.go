package logcount_test

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

	"github.com/coldstart-go/coldstart/internal/logcount"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const interval = 10 * time.Second

func newAgg(t *testing.T) (*logcount.Aggregator, *testclock.Clock, *logtest.Handler) {
	t.Helper()
	h := logtest.New()
	clk := testclock.NewClock(t0)
	a := logcount.New(logcount.Config{Logger: h.Logger(), Clock: clk, Interval: interval})
	t.Cleanup(a.Close)
	return a, clk, h
}

// drainAlarms forgets the timers armed so far, for noAlarm.
func drainAlarms(clk *testclock.Clock) {
	for {
		select {
		case <-clk.Alarms():
		default:
			return
		}
	}
}

// noAlarm asserts that nothing armed a timer on clk since drainAlarms (or
// since clk was made): testclock signals Alarms as a timer is added.
func noAlarm(t *testing.T, clk *testclock.Clock) {
	t.Helper()
	select {
	case <-clk.Alarms():
		t.Fatal("a timer was armed")
	default:
	}
}

// TestThousandsOfEventsMakeOneRecordPerInterval is the point of the
// package: 3,000 refusals from 30 goroutines are one record with the
// count, not 3,000 lines.
func TestThousandsOfEventsMakeOneRecordPerInterval(t *testing.T) {
	a, clk, h := newAgg(t)
	g := a.Group(slog.LevelInfo, "connections refused", slog.String("port", "api"))
	refused, limited := g.Counter("refused"), g.Counter("rate_limited")

	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				refused.Inc()
			}
		}()
	}
	wg.Wait()
	limited.Add(7)
	require.Empty(t, h.Records(), "nothing is logged before the interval ends")

	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	recs := h.WaitMessage(t, "connections refused", 1)
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, slog.LevelInfo, r.Level)
	assert.Equal(t, "api", r.Str("port"))
	assert.EqualValues(t, 3000, r.Uint64(t, "refused"))
	assert.EqualValues(t, 7, r.Uint64(t, "rate_limited"))
	assert.Equal(t, interval, r.Attrs["interval"].Duration())
	_, hasErr := r.Attrs["err"]
	assert.False(t, hasErr)

	// The next interval logs only what grew since; Load stays cumulative.
	for range 500 {
		refused.Inc()
	}
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	recs = h.WaitMessage(t, "connections refused", 2)
	require.Len(t, recs, 2)
	assert.EqualValues(t, 500, recs[1].Uint64(t, "refused"))
	assert.EqualValues(t, 0, recs[1].Uint64(t, "rate_limited"), "every counter of the group is in its record")
	assert.EqualValues(t, 3500, refused.Load())
	assert.EqualValues(t, 7, limited.Load())
}

// TestQuietMeansNoTimerAndNoRecord: an idle component costs nothing, and
// a group with no new counts makes no record.
func TestQuietMeansNoTimerAndNoRecord(t *testing.T) {
	a, clk, h := newAgg(t)
	busy := a.Group(slog.LevelInfo, "busy").Counter("n")
	idle := a.Group(slog.LevelWarn, "idle").Counter("n")
	noAlarm(t, clk)

	busy.Inc()
	drainAlarms(clk)
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	h.WaitMessage(t, "busy", 1)
	// The flush found nothing pending, so it armed nothing. (Group takes
	// the lock the flush holds until it is done.)
	a.Group(slog.LevelInfo, "barrier")
	noAlarm(t, clk)
	clk.Advance(10 * interval)
	a.Close()
	assert.Len(t, h.Records(), 1)
	assert.Empty(t, h.Matching("idle"))
	assert.Zero(t, idle.Load())
}

// TestNoLoggerCountsButNeverArmsATimer: without a logger the counters are
// plain atomics for Report, and no timer or goroutine ever runs.
func TestNoLoggerCountsButNeverArmsATimer(t *testing.T) {
	clk := testclock.NewClock(t0)
	a := logcount.New(logcount.Config{Clock: clk})
	c := a.Group(slog.LevelInfo, "refused").Counter("n")
	for range 1000 {
		c.Inc()
	}
	c.IncErr(errors.New("boom"))
	noAlarm(t, clk)
	a.Close()
	assert.EqualValues(t, 1001, c.Load())

	var zero logcount.Counter // the zero Counter counts, never logs
	zero.Add(3)
	assert.EqualValues(t, 3, zero.Load())
}

// TestCloseFlushesWhatIsPending: a component's last counts are not lost
// with it, and nothing is logged or armed after Close.
func TestCloseFlushesWhatIsPending(t *testing.T) {
	a, clk, h := newAgg(t)
	c := a.Group(slog.LevelInfo, "dials").Counter("local")
	c.Add(42)
	require.NoError(t, clk.WaitAdvance(interval/2, logtest.Guard, 1))
	a.Close()
	recs := h.Matching("dials")
	require.Len(t, recs, 1, "Close logs synchronously")
	assert.EqualValues(t, 42, recs[0].Uint64(t, "local"))
	assert.Equal(t, interval/2, recs[0].Attrs["interval"].Duration(), "the window Close cut short")

	drainAlarms(clk)
	c.Inc()
	noAlarm(t, clk)
	clk.Advance(interval) // the stopped timer does not fire
	a.Close()
	assert.Len(t, h.Records(), 1)
	assert.EqualValues(t, 43, c.Load())
}

// TestErrIsTheLatestAndClearedByTheRecord: a failure group says why, once.
func TestErrIsTheLatestAndClearedByTheRecord(t *testing.T) {
	a, clk, h := newAgg(t)
	g := a.Group(slog.LevelWarn, "dials failed")
	failed, other := g.Counter("failures"), g.Counter("other")
	failed.IncErr(errors.New("first"))
	failed.IncErr(errors.New("connection refused"))
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	r := h.WaitMessage(t, "dials failed", 1)[0]
	assert.Equal(t, slog.LevelWarn, r.Level)
	assert.EqualValues(t, 2, r.Uint64(t, "failures"))
	assert.Equal(t, "connection refused", r.Str("err"))

	other.Inc()
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	r = h.WaitMessage(t, "dials failed", 2)[1]
	_, hasErr := r.Attrs["err"]
	assert.False(t, hasErr, "the error was logged with its count already")
}

// TestNoCountIsLostUnderConcurrentFlushes drives events from several
// goroutines while the clock fires flush after flush: the records add up
// to exactly the events counted, before Close (which would flush a
// stranded count), so a count left with no timer armed would fail it (run
// it with -race).
func TestNoCountIsLostUnderConcurrentFlushes(t *testing.T) {
	a, clk, h := newAgg(t)
	c := a.Group(slog.LevelInfo, "events").Counter("n")
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				c.Inc()
			}
		}()
	}
	stop, ticked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(interval)
			}
		}
	}()
	wg.Wait()
	sum := func(rs []logtest.Record) (n uint64) {
		for _, r := range rs {
			if r.Message == "events" {
				n += r.Attrs["n"].Uint64()
			}
		}
		return n
	}
	h.WaitFor(t, "records summing to every event", func(rs []logtest.Record) bool {
		return sum(rs) == workers*each
	})
	close(stop)
	<-ticked
	a.Close()
	assert.EqualValues(t, workers*each, sum(h.Records()))
	assert.EqualValues(t, workers*each, c.Load())
}

// blockingHandler holds the first record's Handle until release closes,
// so a test can count an event while a flush is logging.
type blockingHandler struct {
	*logtest.Handler
	entered, release chan struct{}
	once             sync.Once
}

func (h *blockingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.once.Do(func() {
		close(h.entered)
		<-h.release
	})
	return h.Handler.Handle(ctx, r)
}

// TestAnEventDuringAFlushIsLoggedNextInterval: an event counted while a
// flush is logging (it sees a flush scheduled, so it schedules none) must
// not be stranded until Close: the flush re-arms for it.
func TestAnEventDuringAFlushIsLoggedNextInterval(t *testing.T) {
	h := &blockingHandler{Handler: logtest.New(), entered: make(chan struct{}), release: make(chan struct{})}
	clk := testclock.NewClock(t0)
	a := logcount.New(logcount.Config{Logger: slog.New(h), Clock: clk, Interval: interval})
	defer a.Close()
	c := a.Group(slog.LevelInfo, "events").Counter("n")

	c.Inc()
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1))
	<-h.entered
	c.Inc() // the flush is logging the first
	close(h.release)
	require.NoError(t, clk.WaitAdvance(interval, logtest.Guard, 1), "no flush was scheduled for the second event")
	recs := h.WaitMessage(t, "events", 2)
	assert.EqualValues(t, 1, recs[0].Uint64(t, "n"))
	assert.EqualValues(t, 1, recs[1].Uint64(t, "n"))
}
