// Package logcount counts per-call events (refused and throttled accepts,
// dials) and logs the counts as one record per interval, never a line per
// call: 3,000 agents refused in a second make one record, not 3,000. The
// counters double as a component's Report counters, so an event costs one
// atomic add, and one atomic load when there is a logger.
//
// Usage sketch:
//
//	agg := logcount.New(logcount.Config{Logger: cfg.Logger, Clock: cfg.Clock})
//	g := agg.Group(slog.LevelInfo, "connections rate-limited or refused", slog.String("port", "api"))
//	limited, refused := g.Counter("rate_limited"), g.Counter("refused")
//	...
//	limited.Inc()            // on the hot path
//	r.RateLimited = limited.Load() // in Report
//	...
//	agg.Close()              // flushes what is pending
package logcount

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/clock"
)

// DefaultInterval is the interval of a Config that leaves it zero.
const DefaultInterval = 10 * time.Second

// Config configures an Aggregator.
type Config struct {
	// Logger receives the records. nil means no logs: the counters still
	// count, and no timer or goroutine is ever started.
	Logger *slog.Logger
	// Clock times the interval. nil means clock.WallClock.
	Clock clock.Clock
	// Interval is the longest an event waits to be logged: the first event
	// after a quiet spell arms a timer, and when it fires every group with
	// new counts makes one record. Zero or negative means DefaultInterval.
	Interval time.Duration
}

// Aggregator logs the counts of its groups once per interval while events
// arrive, and nothing while none do: no timer runs in a quiet spell, and
// none at all without a logger. Between its timer firing and the record,
// a short-lived goroutine runs (the clock's AfterFunc); Close waits for it.
// It is safe for concurrent use.
type Aggregator struct {
	logger   *slog.Logger
	clk      clock.Clock
	interval time.Duration

	// armed is true while a flush is scheduled, and for good after Close.
	// An event loads it after counting and schedules a flush if it is
	// false; a flush stores false before it checks for counts it missed.
	// Either the event sees false or the flush sees the count (both
	// sequentially consistent), so no count is stranded.
	armed atomic.Bool

	wg sync.WaitGroup // one per scheduled flush, done when it has run or been stopped

	mu     sync.Mutex // guards the fields below and every Counter's logged
	groups []*Group
	timer  clock.Timer // the scheduled flush, if any
	since  time.Time   // when the current window began (the timer was armed)
	closed bool
}

// New returns an Aggregator. It starts nothing: the first counted event
// arms the timer.
func New(cfg Config) *Aggregator {
	a := &Aggregator{logger: cfg.Logger, clk: cfg.Clock, interval: cfg.Interval}
	if a.clk == nil {
		a.clk = clock.WallClock
	}
	if a.interval <= 0 {
		a.interval = DefaultInterval
	}
	return a
}

// Group returns a new group of counters logged together: each record has
// msg at level, then attrs (such as port=api), then every counter of the
// group by its key with the count since the group's previous record, then
// "interval" (how long the window was) and, if one was noted, "err".
func (a *Aggregator) Group(level slog.Level, msg string, attrs ...slog.Attr) *Group {
	g := &Group{a: a, level: level, msg: msg, attrs: attrs}
	a.mu.Lock()
	a.groups = append(a.groups, g)
	a.mu.Unlock()
	return g
}

// Close logs the counts not yet logged, and stops the timer (waiting for
// a flush already running). Events counted after Close still count, but
// are never logged. Close is idempotent.
func (a *Aggregator) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.armed.Store(true) // no event schedules anything from now on
	if a.timer != nil && a.timer.Stop() {
		a.wg.Done() // its flush will never run
	}
	a.flushLocked()
	a.mu.Unlock()
	a.wg.Wait()
}

// schedule arms the timer, unless a flush is scheduled already.
func (a *Aggregator) schedule() {
	if !a.armed.CompareAndSwap(false, true) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.armLocked()
	}
}

func (a *Aggregator) armLocked() {
	a.since = a.clk.Now()
	a.wg.Add(1)
	a.timer = a.clk.AfterFunc(a.interval, a.tick)
}

// tick is the scheduled flush.
func (a *Aggregator) tick() {
	defer a.wg.Done()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return // Close has flushed
	}
	a.flushLocked()
	a.armed.Store(false)
	// An event counted during the flush may have seen armed still true.
	if a.pendingLocked() && a.armed.CompareAndSwap(false, true) {
		a.armLocked()
	}
}

func (a *Aggregator) pendingLocked() bool {
	for _, g := range a.groups {
		for _, c := range g.counters {
			if c.n.Load() != c.logged {
				return true
			}
		}
	}
	return false
}

// flushLocked makes one record per group with new counts.
func (a *Aggregator) flushLocked() {
	if a.logger == nil {
		return
	}
	window := a.clk.Now().Sub(a.since)
	for _, g := range a.groups {
		g.flushLocked(window)
	}
	a.since = a.clk.Now()
}

// Group is a set of counters logged together as one record.
type Group struct {
	a     *Aggregator
	level slog.Level
	msg   string
	attrs []slog.Attr

	counters []*Counter            // guarded by a.mu
	err      atomic.Pointer[error] // the latest noted error, cleared by each record
}

// Counter returns a new counter of the group, logged under key.
func (g *Group) Counter(key string) *Counter {
	c := &Counter{g: g, key: key}
	if g.a.logger != nil {
		c.a = g.a
	}
	g.a.mu.Lock()
	g.counters = append(g.counters, c)
	g.a.mu.Unlock()
	return c
}

func (g *Group) flushLocked(window time.Duration) {
	attrs := make([]slog.Attr, 0, len(g.attrs)+len(g.counters)+2)
	attrs = append(attrs, g.attrs...)
	grew := false
	for _, c := range g.counters {
		n := c.n.Load()
		delta := n - c.logged
		c.logged = n
		grew = grew || delta != 0
		attrs = append(attrs, slog.Uint64(c.key, delta))
	}
	errp := g.err.Swap(nil)
	if !grew {
		return
	}
	attrs = append(attrs, slog.Duration("interval", window))
	if errp != nil {
		attrs = append(attrs, slog.Any("err", *errp))
	}
	g.a.logger.LogAttrs(context.Background(), g.level, g.msg, attrs...)
}

// Counter is a cumulative event count. Its value (Load) never resets: a
// record logs how much it grew since the previous one. The zero Counter
// counts and is never logged.
type Counter struct {
	n      atomic.Uint64
	a      *Aggregator // nil: never logged (no logger, or the zero Counter)
	g      *Group
	key    string
	logged uint64 // n at the group's previous record; guarded by a.mu
}

// Inc counts one event.
func (c *Counter) Inc() { c.Add(1) }

// Add counts n events.
func (c *Counter) Add(n uint64) {
	c.n.Add(n)
	if c.a != nil && !c.a.armed.Load() {
		c.a.schedule()
	}
}

// IncErr counts one event and notes err as the group's latest error, shown
// as "err" in its next record. It is for failure paths: it allocates.
func (c *Counter) IncErr(err error) {
	if c.a != nil && err != nil {
		// Noted before it is counted, so the record that counts it has it.
		c.g.err.Store(&err)
	}
	c.Add(1)
}

// Load returns the number of events counted so far.
func (c *Counter) Load() uint64 { return c.n.Load() }
