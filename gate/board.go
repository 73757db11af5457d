package gate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/juju/clock"
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

// A Board answers "what is startup still waiting on?". Register the gates a
// process starts with; Report lists each one's state, how long it has been
// locked (or took to open), the order in which they opened, and why any
// failed. It is cheap enough to call from a status endpoint or a log line,
// and Handler serves it as a Kubernetes-style /readyz.
//
// A Board is safe for concurrent use; the zero Board is not usable, make one
// with NewBoard.
type Board struct {
	clk clock.Clock

	mu      sync.Mutex
	entries []*entry
}

type entry struct {
	name     string
	w        Waiter
	since    time.Time
	resolved time.Time // zero until seen resolved
	seq      uint64    // place in resolveSeq; 0 while locked
	err      error
}

// NewBoard returns an empty board timed on clk (nil means clock.WallClock).
func NewBoard(clk clock.Clock) *Board {
	if clk == nil {
		clk = clock.WallClock
	}
	return &Board{clk: clk}
}

// New makes a gate with gate.New and adds it to the board.
func (b *Board) New(name string) *Lock {
	l := New(name)
	b.Add(l)
	return l
}

// Add puts l on the board under its own name. A *Lock's opening or failure
// is recorded the moment it happens, so the order is exact.
func (b *Board) Add(l *Lock) {
	if l == nil {
		panic("gate.Board.Add: nil *Lock")
	}
	b.Track(l.Name(), l)
}

// Track puts any Waiter on the board under name. For a *Lock the opening is
// recorded as it happens; any other Waiter is looked at when a report is
// made, so its opening time and order are those of the first report that
// saw it open. Track never starts a goroutine.
func (b *Board) Track(name string, w Waiter) {
	if l, isLock := w.(*Lock); w == nil || (isLock && l == nil) {
		panic(fmt.Sprintf("gate.Board.Track(%q): nil Waiter", name))
	}
	e := &entry{name: name, w: w}
	b.mu.Lock()
	e.since = b.clk.Now()
	b.entries = append(b.entries, e)
	b.mu.Unlock()
	if l, ok := w.(*Lock); ok {
		l.onResolve(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.markResolved(e, l.Err(), l.resolvedSeq())
		})
	}
}

// Watch puts on the board an entry fed by two channels, for state kept
// outside this package, and returns the entry's gate: it unlocks when
// opened closes and fails when failed closes (a nil channel never closes),
// whichever happens first; if both are closed when the board first looks,
// it fails. Build composites on the returned gate (AllOf("stable", ...,
// w)), not on the channels, and they resolve after it, in the board's
// order too. Its place in the opening order is when the board saw the
// channel close: at once if it already has, else on the one goroutine
// Watch starts, which ends when either channel closes. A pair that never
// closes keeps that goroutine, as a gate that never resolves keeps its
// waiters. Both channels nil is a programming error and panics.
func (b *Board) Watch(name string, opened, failed <-chan struct{}) *Lock {
	if opened == nil && failed == nil {
		panic(fmt.Sprintf("gate.Board.Watch(%q): nil opened and failed channels", name))
	}
	l := New(name)
	b.Add(l)
	if settle(l, opened, failed) {
		return l
	}
	go func() {
		select {
		case <-opened:
		case <-failed:
		}
		settle(l, opened, failed)
	}()
	return l
}

// settle resolves l if either channel has closed, failed first, and
// reports whether it did.
func settle(l *Lock, opened, failed <-chan struct{}) bool {
	select {
	case <-failed:
		l.Fail(errFailedChannel)
		return true
	default:
	}
	select {
	case <-opened:
		l.Unlock()
		return true
	default:
		return false
	}
}

// look records the resolution of e's gate if it has resolved but no hook
// has recorded it yet; b.mu must be held.
func (b *Board) look(e *entry) {
	switch w := e.w.(type) {
	case *Lock:
		// Resolved, but the board's hook has not run yet (the resolving
		// goroutine is still running earlier hooks): its place in the
		// order is already fixed, and a gate opened after it and reported
		// before this look must stay after it.
		if seq := w.resolvedSeq(); seq != 0 {
			b.markResolved(e, w.Err(), seq)
		}
	default:
		if e.w.IsUnlocked() {
			b.markResolved(e, nil, 0)
			return
		}
		if f, ok := e.w.(failer); ok {
			select {
			case <-f.Done(): // a foreign failer's Done without Err is a failure too
				b.markResolved(e, outcome(e.w, f), 0)
			default:
			}
		}
	}
}

// markResolved records e's resolution once; b.mu must be held. A seq of 0
// (a foreign Waiter, seen resolved only now) takes the next place in the
// order.
func (b *Board) markResolved(e *entry, err error, seq uint64) {
	if e.seq != 0 {
		return
	}
	if seq == 0 {
		seq = resolveSeq.Add(1)
	}
	e.seq = seq
	e.resolved = b.clk.Now()
	e.err = err
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
	// Err is the failure of a gate that failed: it names the gate and
	// matches the cause (errors.Is).
	Err error
}

// Report is a board's snapshot: every gate, in the order they were added.
type Report []Entry

// Report returns the state of every gate on the board.
func (b *Board) Report() Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	r := make(Report, len(b.entries))
	var seqs []uint64
	for _, e := range b.entries {
		if e.seq == 0 {
			b.look(e)
		}
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
		case e.err != nil:
			s.State, s.For = StateFailed, e.resolved.Sub(e.since)
		default:
			s.State, s.For = StateUnlocked, e.resolved.Sub(e.since)
		}
		r[i] = s
	}
	return r
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

// String summarises the report on one line, for logs:
//
//	waiting on api-caller (12s), upgrade-steps (3s); failed: mongo (5s: no quorum); 4 open
func (r Report) String() string {
	var waiting, failed []string
	open := 0
	for _, s := range r {
		switch s.State {
		case StateLocked:
			waiting = append(waiting, fmt.Sprintf("%s (%s)", s.Name, s.For.Round(time.Millisecond)))
		case StateFailed:
			cause := causeOf(s.Err)
			failed = append(failed, fmt.Sprintf("%s (%s: %v)", s.Name, s.For.Round(time.Millisecond), cause))
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

// causeOf returns the cause inside a gate's failure, for lines that already
// name the gate.
func causeOf(err error) error {
	if fe, ok := err.(*failedError); ok {
		return fe.Err
	}
	return err
}
