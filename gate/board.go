package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/internal/printable"
)

// State is where a gate stands in a Board's report.
type State int

// The states of a gate on a board.
const (
	StateLocked   State = iota // not yet opened
	StateUnlocked              // opened, for good
	StateFailed                // will never open
)

func (s State) String() string {
	switch s {
	case StateLocked:
		return "locked"
	case StateUnlocked:
		return "unlocked"
	case StateFailed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// A Board answers "what is startup still waiting on?" and, afterwards,
// "what did it wait on?" (and the same of the stop, once it drains:
// BoardConfig.Drain): put on it gates (Add) and outside components
// (Follow); Report gives each entry's state, time, order and failure,
// Timeline its history and critical chain, cheaply enough for a status
// endpoint (package gate/boardview). A Board is safe for concurrent use;
// the zero Board is not usable, make one with NewBoard.
type Board struct {
	name  string
	clk   clock.Clock
	log   *slog.Logger // nil: no logs
	start time.Time    // when NewBoard made it: the timeline's zero

	// done is closed by Close: the Follow and Drain goroutines end.
	done chan struct{}
	// drain is BoardConfig.Drain; draining is closed, under mu, once the
	// draining entry is on the board (Draining).
	drain    <-chan struct{}
	draining chan struct{}
	// active counts what may still log or call a component, for Close to
	// wait for; added to only under mu while open (no Add races Wait).
	active sync.WaitGroup

	mu       sync.Mutex
	entries  []*entry
	names    map[string]bool // the entries' names: each is on the board once
	closed   bool
	closedAt time.Time // the clock when Close was first called
}

// BoardConfig is what a Board is named, timed on and logs to. The zero
// value is ready to use: no name, the wall clock, no logs.
type BoardConfig struct {
	// Name names the board where several are shown together (a process
	// in a trace, a swimlane in a picture): "c0", "controller-1". It is
	// Timeline.Board. Empty means unnamed; a viewer numbers it.
	Name string
	// Clock stamps when the board starts and when each entry is added,
	// opened or failed. nil means clock.WallClock.
	Clock clock.Clock
	// Logger receives "gate opened" (Info) and "gate failed" (Warn; Info
	// for context.Canceled) as each entry resolves, with the keys gate,
	// waited and err, and "drain started" (Info, gate) once (Drain); see
	// the README's Logs. Nothing else logs, nothing logs once Close has
	// returned; nil means no logs.
	Logger *slog.Logger
	// Drain, once closed, starts the board's drain, the stop's mirror of
	// startup: at once a locked entry named "draining" is put on the board
	// (so the board is never ready again: a /readyz answers 503), Draining
	// closes and "drain started" is logged. The stop's own steps are
	// entries added after it ("grace over", "calls finished", "lease
	// handed over", "listener closed"), on the same timeline. NewBoard
	// then starts one goroutine, which ends when Drain closes or the board
	// is closed. nil means the board never drains.
	Drain <-chan struct{}
}

// drainEntry names the entry a drain puts on its board.
const drainEntry = "draining"

type entry struct {
	name     string
	w        Waiter
	detail   func() string // what the entry's component says while locked; nil if nothing
	since    time.Time
	resolved time.Time // zero until seen resolved
	seq      uint64    // place in resolveSeq; 0 while locked
	err      error
	src      *source // a Follow entry's channels; nil otherwise
}

// source is what a Follow entry's gate resolves from; a report settles it
// (DESIGN.md, "Follow").
type source struct {
	l              *Lock
	opened, failed <-chan struct{}
	cause          func() error // nil: errFailedChannel
}

// NewBoard returns an empty board, started now on cfg.Clock.
func NewBoard(cfg BoardConfig) *Board {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.WallClock
	}
	b := &Board{name: cfg.Name, clk: clk, log: cfg.Logger, start: clk.Now(), done: make(chan struct{}),
		drain: cfg.Drain, draining: make(chan struct{}), names: map[string]bool{}}
	if cfg.Drain != nil {
		b.active.Add(1)
		go func() {
			defer b.active.Done()
			select {
			case <-cfg.Drain:
				b.settleDrain()
			case <-b.done:
			}
		}()
	}
	return b
}

// Draining returns a channel closed once the board has started draining
// (BoardConfig.Drain closed): by then its "draining" entry is on it, so
// what follows the channel (a guard that refuses calls, a health service
// that says NOT_SERVING, systemd's STOPPING=1) acts after readiness went
// false, never before. It never closes on a board without Drain, nor
// once the board is closed before Drain closed.
func (b *Board) Draining() <-chan struct{} { return b.draining }

// settleDrain starts the drain if Drain has closed and nothing has
// started it yet; it never blocks. A report, the board's goroutine and
// each Add call it, so that no report after Drain closed is ready and no
// entry added after it comes before the draining entry.
func (b *Board) settleDrain() {
	if b.drain == nil {
		return // most boards: no lock taken
	}
	b.mu.Lock()
	e := b.drainNow()
	b.mu.Unlock()
	b.drained(e)
}

// drainNow puts the draining entry on the board and closes b.draining if
// Drain has closed, the board is open and it has not done so yet; it
// returns the entry, counted active, for drained, else nil. b.mu must be
// held.
func (b *Board) drainNow() *entry {
	select {
	case <-b.drain:
	default:
		return nil // not yet, or never (nil)
	}
	select {
	case <-b.draining:
		return nil // started already
	default:
	}
	if b.closed {
		return nil
	}
	e := b.put(&entry{name: drainEntry, w: New(drainEntry)})
	close(b.draining)
	b.active.Add(1)
	return e
}

// drained watches and logs the entry drainNow returned, if any; b.mu must
// not be held.
func (b *Board) drained(e *entry) {
	if e == nil {
		return
	}
	defer b.active.Done()
	b.watch(e)
	if b.log != nil {
		b.log.LogAttrs(context.Background(), slog.LevelInfo, "drain started", slog.String("gate", e.name))
	}
}

// Add puts w on the board under name. A *Lock is recorded the moment it
// resolves; any other Waiter when a report first sees it resolved (one
// with a Detail() string method says what it does while locked). Add
// starts no goroutine; a nil w panics. A name already on the board does
// not take w: a failed entry matching ErrDuplicateName is added instead,
// under "name (2)" or the next free number (DESIGN.md, "Names").
//
//	serving := gate.New("serving")
//	board.Add("serving", serving)
func (b *Board) Add(name string, w Waiter) {
	if l, isLock := w.(*Lock); w == nil || (isLock && l == nil) {
		panic(fmt.Sprintf("gate.Board.Add(%q): nil Waiter", printable.Name(name)))
	}
	e := &entry{name: name, w: w}
	if d, ok := w.(detailer); ok {
		e.detail = d.Detail
	}
	b.add(e)
}

// detailer is a Waiter (or Component) that says what it is doing.
type detailer interface{ Detail() string }

// add appends e, stamped now, or the failed entry that replaces a
// duplicate (see Add), whose gate it returns; else nil.
func (b *Board) add(e *entry) (duplicate *Lock) {
	b.mu.Lock()
	drain := b.drainNow()
	put := b.put(e)
	b.mu.Unlock()
	b.drained(drain)
	if put != e {
		duplicate = put.w.(*Lock)
	}
	b.watch(put)
	return duplicate
}

// put appends e, stamped now, or the failed entry that replaces a
// duplicate (see Add), and returns the entry it appended; b.mu must be
// held.
func (b *Board) put(e *entry) *entry {
	if b.names[e.name] {
		dup := b.duplicate(e.name)
		e = &entry{name: dup.name, w: dup}
	}
	b.names[e.name] = true
	e.since = b.clk.Now()
	b.entries = append(b.entries, e)
	return e
}

// watch records e the moment its gate resolves, if it is a *Lock; b.mu
// must not be held.
func (b *Board) watch(e *entry) {
	if l, ok := e.w.(*Lock); ok {
		l.onResolve(func() {
			if !b.enter() {
				return // closed: the board records nothing more
			}
			defer b.active.Done()
			b.mu.Lock()
			marked := b.markResolved(e, l.Err(), l.resolvedSeq())
			b.mu.Unlock()
			if marked {
				b.logResolved(e)
			}
		})
	}
}

// duplicate returns the failed gate that stands for a second entry named
// name (see Add); b.mu must be held.
func (b *Board) duplicate(name string) *Lock {
	n := 2
	for b.names[name+" ("+strconv.Itoa(n)+")"] {
		n++
	}
	on := ""
	if b.name != "" {
		on = fmt.Sprintf(" on board %q", printable.Name(b.name))
	}
	l := New(name + " (" + strconv.Itoa(n) + ")")
	l.Fail(fmt.Errorf("%w %q%s: a name is on a board once", ErrDuplicateName, printable.Name(name), on))
	return l
}

// enter reports whether the board is open and, if it is, counts the
// caller as active until it calls b.active.Done: Close waits for it.
func (b *Board) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.active.Add(1)
	return true
}

// Close ends the board: its Follow goroutines end, and once Close has
// returned it logs, calls and records nothing more (a locked entry, and a
// locked Follow gate and its composites, stay locked: wait with a ctx that
// ends). Report and Timeline then answer as of Close. Close is idempotent,
// safe to call concurrently, returns nil once the board is quiet, and must
// not be called from the Logger's handler or a Component's method.
func (b *Board) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed, b.closedAt = true, b.clk.Now()
		close(b.done)
	}
	b.mu.Unlock()
	b.active.Wait()
	return nil
}

// Component is state kept outside this package that a board shows in its
// own words (Follow): *upgrade.Gate, *listener.Listener, *lease.Tracker;
// Channels makes one of a bare pair of channels.
type Component interface {
	// Completed returns a channel closed when the component next succeeds.
	Completed() <-chan struct{}
	// Failed returns a channel closed when the component next fails.
	Failed() <-chan struct{}
	// Cause returns why the component last failed, or nil if it never has.
	Cause() error
	// Detail says in a few words what the component is doing, shown while
	// its entry is locked ("running upgrade steps"); "" adds nothing.
	Detail() string
}

// Follow puts c on the board under name and returns the entry's gate: it
// unlocks when c.Completed() closes and fails with c.Cause() (errors.Is)
// when c.Failed() closes, whichever comes first; both closed at the first
// look is a failure; a nil channel never closes. While it is locked each
// report shows c.Detail() (Entry.Detail). Follow starts one goroutine,
// which ends when a channel closes or the board is closed. Build
// composites on the returned gate, not the channels, and declare what it
// waited for with After. A nil c, or both channels nil, panics. Under a
// name already on the board, c is not followed: Follow returns the failed
// duplicate's gate (see Add). DESIGN.md, "Follow", tells why.
func (b *Board) Follow(name string, c Component) *Lock {
	if c == nil {
		panic(fmt.Sprintf("gate.Board.Follow(%q): nil Component", printable.Name(name)))
	}
	opened, failed := c.Completed(), c.Failed()
	if opened == nil && failed == nil {
		panic(fmt.Sprintf("gate.Board.Follow(%q): nil Completed and Failed channels", printable.Name(name)))
	}
	src := &source{l: New(name), opened: opened, failed: failed, cause: c.Cause}
	e := &entry{name: name, w: src.l, src: src}
	if _, bare := c.(channels); !bare { // a bare pair has nothing to say
		e.detail = c.Detail
	}
	if dup := b.add(e); dup != nil {
		return dup
	}
	if !b.enter() {
		return src.l // closed: followed no more
	}
	if src.settle() {
		b.active.Done()
		return src.l
	}
	go func() {
		defer b.active.Done()
		select {
		case <-opened:
		case <-failed:
		case <-b.done:
			return
		}
		src.settle()
	}()
	return src.l
}

// Channels returns a Component of a bare pair of channels, with no Cause
// or Detail: Follow fails its entry with "its failed channel is closed".
//
//	board.Follow("migrations", gate.Channels(migrated, migrationFailed))
func Channels(opened, failed <-chan struct{}) Component { return channels{opened, failed} }

type channels struct{ opened, failed <-chan struct{} }

func (c channels) Completed() <-chan struct{} { return c.opened }
func (c channels) Failed() <-chan struct{}    { return c.failed }
func (c channels) Cause() error               { return nil }
func (c channels) Detail() string             { return "" }

// settle resolves the source's gate if either channel has closed, failed
// first, and reports whether it did; it never blocks. A gate resolves
// once: of settles racing (the entry's goroutine, reports), the first wins.
func (s *source) settle() bool {
	select {
	case <-s.failed:
		var err error
		if s.cause != nil {
			err = s.cause()
		}
		if err == nil {
			err = errFailedChannel
		}
		s.l.Fail(err)
		return true
	default:
	}
	select {
	case <-s.opened:
		s.l.Unlock()
		return true
	default:
		return false
	}
}

// settleSources settles the sources of the entries still locked; b.mu
// must not be held (it resolves gates, whose hooks take it).
func (b *Board) settleSources() {
	var buf [16]*source // no allocation for a usual board
	pending := buf[:0]
	b.mu.Lock()
	for _, e := range b.entries {
		if e.seq == 0 && e.src != nil {
			pending = append(pending, e.src)
		}
	}
	b.mu.Unlock()
	for _, src := range pending {
		src.settle()
	}
}

// lookAll looks at every locked entry and returns those it recorded, to
// be logged once b.mu is released; b.mu must be held.
func (b *Board) lookAll() (marked []*entry) {
	for _, e := range b.entries {
		if e.seq == 0 && b.look(e) {
			marked = append(marked, e)
		}
	}
	return marked
}

// look records the resolution of e's gate if it has resolved but no hook
// has recorded it yet, and reports whether it did; b.mu must be held.
func (b *Board) look(e *entry) bool {
	switch w := e.w.(type) {
	case *Lock:
		// Resolved, its hook not run yet: its place is already fixed.
		if seq := w.resolvedSeq(); seq != 0 {
			return b.markResolved(e, w.Err(), seq)
		}
	default:
		if e.w.IsUnlocked() {
			return b.markResolved(e, nil, 0)
		}
		if f, ok := e.w.(failer); ok {
			select {
			case <-f.Done(): // a foreign failer's Done without Err is a failure too
				err := outcome(e.w, f)
				if err == ErrFailed {
					err = errNoCause
				}
				return b.markResolved(e, &FailedError{Name: e.name, Err: err}, 0)
			default:
			}
		}
	}
	return false
}

// markResolved records e's resolution once, unless the board is closed,
// and reports whether this call did; b.mu must be held. A seq of 0 takes
// the next place in the order. Recorded fields never change again.
func (b *Board) markResolved(e *entry, err error, seq uint64) bool {
	if e.seq != 0 || b.closed {
		return false
	}
	if seq == 0 {
		seq = resolveSeq.Add(1)
	}
	e.seq = seq
	e.resolved = b.clk.Now()
	e.err = err
	return true
}

// logResolved logs each entry's opening or failure; b.mu must not be held
// (a handler may read the board), and the caller must have entered.
func (b *Board) logResolved(es ...*entry) {
	if b.log == nil {
		return
	}
	for _, e := range es {
		gateAttr, waited := slog.String("gate", e.name), slog.Duration("waited", e.resolved.Sub(e.since))
		switch {
		case e.err == nil:
			b.log.LogAttrs(context.Background(), slog.LevelInfo, "gate opened", gateAttr, waited)
		case errors.Is(e.err, context.Canceled): // the owner's shutdown
			b.log.LogAttrs(context.Background(), slog.LevelInfo, "gate failed", gateAttr, waited, slog.Any("err", causeOf(e.err)))
		default:
			b.log.LogAttrs(context.Background(), slog.LevelWarn, "gate failed", gateAttr, waited, slog.Any("err", causeOf(e.err)))
		}
	}
}

// Entry is one gate's line in a Report.
type Entry struct {
	Name  string
	State State
	// Since is when the gate was put on the board.
	Since time.Time
	// For is how long the gate has been locked, or how long it took to
	// open or fail.
	For time.Duration
	// Order is 1 for the first gate on the board to open or fail, 2 for
	// the next, and so on; 0 while the gate is locked.
	Order int
	// Err is the failure of a gate that failed: a *FailedError, which
	// names the gate and matches the cause (errors.Is).
	Err error
	// Detail is what a locked entry's component says it is doing (see
	// Follow; an added Waiter with a Detail() string method says it too);
	// empty once the entry has resolved, and on a closed board.
	Detail string
}

// Report is a board's snapshot: every gate, in the order they were added.
type Report []Entry

// Report returns the state of every gate on the board. It asks for the
// Details after releasing the board (a Detail may read it); on a closed
// board it asks nothing and shows the board as it was when closed.
func (b *Board) Report() Report {
	if !b.enter() {
		r, _, _ := b.report()
		return r
	}
	defer b.active.Done()
	b.settleDrain()
	b.settleSources()
	r, details, marked := b.report()
	b.logResolved(marked...)
	for i, d := range details {
		if d != nil {
			r[i].Detail = d()
		}
	}
	return r
}

// report is Report under the board's lock, with the locked entries' Detail
// funcs (or nil) still to call and the entries it saw resolve to log.
func (b *Board) report() (_ Report, _ []func() string, marked []*entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	r := make(Report, len(b.entries))
	var (
		seqs    []uint64
		details []func() string
	)
	marked = b.lookAll()
	for _, e := range b.entries {
		if e.seq != 0 {
			seqs = append(seqs, e.seq)
		}
	}
	slices.Sort(seqs)
	for i, e := range b.entries {
		s := Entry{Name: e.name, Since: e.since, Err: e.err}
		if e.seq != 0 {
			s.Order, _ = slices.BinarySearch(seqs, e.seq)
			s.Order++
		}
		switch {
		case e.seq == 0:
			s.State, s.For = StateLocked, now.Sub(e.since)
			if e.detail != nil {
				if details == nil {
					details = make([]func() string, len(b.entries))
				}
				details[i] = e.detail
			}
		case e.err != nil:
			s.State, s.For = StateFailed, e.resolved.Sub(e.since)
		default:
			s.State, s.For = StateUnlocked, e.resolved.Sub(e.since)
		}
		r[i] = s
	}
	return r, details, marked
}

// Opened returns the names of the gates that have unlocked, in the order
// they unlocked.
func (r Report) Opened() []string {
	var open []Entry
	for _, s := range r {
		if s.State == StateUnlocked {
			open = append(open, s)
		}
	}
	sort.Slice(open, func(i, j int) bool { return open[i].Order < open[j].Order })
	names := make([]string, len(open))
	for i, s := range open {
		names[i] = s.Name
	}
	return names
}

// String summarises the report on one line, for logs, with names, Details
// and causes printable and cut as boardview prints them:
//
//	waiting on api-caller (12s), upgrade (3s: running upgrade steps); failed: mongo (5s: no quorum); 4 open
func (r Report) String() string {
	var waiting, failed []string
	open := 0
	for _, s := range r {
		name := printable.Name(s.Name)
		switch s.State {
		case StateLocked:
			if s.Detail != "" {
				waiting = append(waiting, fmt.Sprintf("%s (%s: %s)", name, s.For.Round(time.Millisecond), printable.Text(s.Detail)))
			} else {
				waiting = append(waiting, fmt.Sprintf("%s (%s)", name, s.For.Round(time.Millisecond)))
			}
		case StateFailed:
			failed = append(failed, fmt.Sprintf("%s (%s: %s)", name, s.For.Round(time.Millisecond), causeText(s.Err)))
		default:
			open++
		}
	}
	var parts []string
	if len(waiting) > 0 {
		parts = append(parts, "waiting on "+strings.Join(waiting, ", "))
	}
	if len(failed) > 0 {
		parts = append(parts, "failed: "+strings.Join(failed, ", "))
	}
	parts = append(parts, fmt.Sprintf("%d open", open))
	return strings.Join(parts, "; ")
}

// now is the time a report is taken at: the clock's, or when the board
// was closed; b.mu must be held.
func (b *Board) now() time.Time {
	if b.closed {
		return b.closedAt
	}
	return b.clk.Now()
}

// causeOf returns the cause inside a gate's failure, for lines that already
// name the gate.
func causeOf(err error) error {
	if fe, ok := err.(*FailedError); ok {
		return fe.Err
	}
	return err
}

// causeText is the cause inside a gate's failure, printable.
func causeText(err error) string {
	if err = causeOf(err); err == nil {
		return "<nil>"
	}
	return printable.Text(err.Error())
}
