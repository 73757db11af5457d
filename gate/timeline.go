package gate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/internal/printable"
)

// A Timeline is a board's startup (and drain) history, as systemd-analyze
// shows a machine's: when each entry was added, when it opened or failed,
// what it waited for, and each entry's critical chain — the input that
// opened last before it, that input's own, and so on back to an entry that
// waited for nothing. Every time in it is an offset from the board's start (NewBoard).
type Timeline struct {
	// Board is the board's name (BoardConfig.Name).
	Board string
	// Start is when the board was made, on its clock: with the wall clock,
	// timelines of several boards and processes line up by it.
	Start time.Time
	// End is when the timeline was taken (or the board closed).
	End time.Duration
	// Entries are the board's entries, in the order they were added.
	Entries []Span
}

// Span is one entry on a Timeline.
type Span struct {
	Name  string
	State State
	// Added is when the entry was put on the board.
	Added time.Duration
	// Ended is when it opened or failed (systemd's "@"); while it is
	// locked, the timeline's End.
	Ended time.Duration
	// Took is how long it took (so far, while locked) after the later of
	// Added and its resolved critical input's Ended (systemd's "+").
	Took time.Duration
	// Order is its place in the order of openings and failures, as in a
	// Report; 0 while it is locked.
	Order int
	// After holds the indexes in Entries of what it waited for: a
	// composite's parts, or the inputs given to Lock.After. A part that is
	// not on the board is replaced by the board's entries it waited for.
	After []int
	// Critical is the index in Entries of its critical input, or -1 if it
	// has none. For an entry that opened or failed, it is the input that
	// resolved last before it did (AllOf's last part, AnyOf's first); for
	// a locked one, the first input still locked (what it waits on now),
	// else the input that resolved last.
	Critical int
	// Err is the failure of an entry that failed, as in a Report.
	Err error
	// Detail is what a locked entry's component says it is doing.
	Detail string
}

// Timeline returns the board's history so far; it never blocks on a gate,
// and asks for Details and ends as Report does.
func (b *Board) Timeline() Timeline {
	live := b.enter()
	if live {
		defer b.active.Done()
		b.settleDrain()
		b.settleSources()
	}
	rows, now, marked := b.rows()
	b.logResolved(marked...)
	t := Timeline{Board: b.name, Start: b.start, End: now.Sub(b.start), Entries: make([]Span, len(rows))}

	index := make(map[*Lock]int, len(rows)) // a gate's first entry
	seqs := make([]uint64, 0, len(rows))
	for i, e := range rows {
		if l, ok := e.w.(*Lock); ok {
			if _, dup := index[l]; !dup {
				index[l] = i
			}
		}
		if e.seq != 0 {
			seqs = append(seqs, e.seq)
		}
	}
	slices.Sort(seqs)
	for i, e := range rows {
		s := Span{Name: e.name, Added: e.since.Sub(b.start), Ended: t.End, Err: e.err, Critical: -1}
		switch {
		case e.seq == 0:
			s.State = StateLocked
			if e.detail != nil && live {
				s.Detail = e.detail()
			}
		case e.err != nil:
			s.State, s.Ended = StateFailed, e.resolved.Sub(b.start)
		default:
			s.State, s.Ended = StateUnlocked, e.resolved.Sub(b.start)
		}
		if e.seq != 0 {
			s.Order, _ = slices.BinarySearch(seqs, e.seq)
			s.Order++
		}
		if l, ok := e.w.(*Lock); ok {
			s.After = onBoard(l, i, index)
		}
		t.Entries[i] = s
	}
	for i := range t.Entries {
		s := &t.Entries[i]
		s.Critical = critical(rows, i, s.After)
		since := s.Added
		if c := s.Critical; c >= 0 && t.Entries[c].State != StateLocked {
			since = max(since, t.Entries[c].Ended)
		}
		s.Took = max(s.Ended-since, 0)
	}
	return t
}

// rows copies the board's entries under its lock, after lookAll; it
// returns when it took them and the entries it saw resolve, still to log.
func (b *Board) rows() (rows []entry, now time.Time, marked []*entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	marked = b.lookAll()
	rows = make([]entry, len(b.entries))
	for i, e := range b.entries {
		rows[i] = *e
	}
	return rows, b.now(), marked
}

// onBoard returns the indexes of the board entries l waited for, once
// each, in order, but self; a gate not on the board stands for its own.
func onBoard(l *Lock, self int, index map[*Lock]int) []int {
	if len(l.inputs()) == 0 {
		return nil // most entries: no map to make
	}
	var (
		out  []int
		seen = map[*Lock]bool{l: true}
		walk func(*Lock)
	)
	walk = func(l *Lock) {
		for _, in := range l.inputs() {
			if seen[in] {
				continue
			}
			seen[in] = true
			if i, ok := index[in]; ok {
				if i != self && !slices.Contains(out, i) {
					out = append(out, i)
				}
				continue
			}
			walk(in)
		}
	}
	walk(l)
	return out
}

// critical picks rows[i]'s critical input among its inputs (see
// Span.Critical), or -1, by seq: not by time, which may tie.
func critical(rows []entry, i int, inputs []int) int {
	self := rows[i].seq
	best := -1
	for _, j := range inputs {
		s := rows[j].seq
		switch {
		case s == 0:
			if self == 0 { // a locked entry waits on its first locked input
				return j
			}
		case self != 0 && s > self: // resolved after: not what it waited for
		case best < 0 || s > rows[best].seq:
			best = j
		}
	}
	return best
}

// CriticalChain returns the critical chain of the (first) entry named
// name: the entry, its critical input, that one's, and so on, as
// systemd-analyze critical-chain prints a unit's. name "" asks for the
// board's own: that of the entry which ended last (a locked one ends now)
// among those no other entry waited for. It returns nil for a name on no
// entry, and for an empty board.
func (t Timeline) CriticalChain(name string) Chain {
	at := t.Index(name)
	if at < 0 {
		return nil
	}
	return t.spans(t.chain(at))
}

// chain returns the indexes of the chain that starts at Entries[at].
func (t Timeline) chain(at int) []int {
	var (
		chain []int
		seen  = make([]bool, len(t.Entries))
	)
	// A chain through locked entries can loop (Lock.After can declare a
	// cycle that never resolves); seen stops it.
	for i := at; i >= 0 && !seen[i]; i = t.Entries[i].Critical {
		seen[i] = true
		chain = append(chain, i)
	}
	return chain
}

// spans returns the entries at the indexes given.
func (t Timeline) spans(indexes []int) Chain {
	c := make(Chain, len(indexes))
	for k, i := range indexes {
		c[k] = t.Entries[i]
	}
	return c
}

// Index returns the index in Entries of the entry CriticalChain(name)
// starts from — the first entry named name, or for "" the head of the
// board's own chain — or -1 if there is none. Follow Critical from it to
// walk the chain by index, as a picture that marks the chain does.
func (t Timeline) Index(name string) int {
	if name != "" {
		return slices.IndexFunc(t.Entries, func(s Span) bool { return s.Name == name })
	}
	waitedFor := make([]bool, len(t.Entries))
	for _, s := range t.Entries {
		for _, j := range s.After {
			waitedFor[j] = true
		}
	}
	last := -1
	// Among what nothing waits for; if every entry is waited for (a cycle
	// declared with Lock.After), among them all.
	for _, topsOnly := range []bool{true, false} {
		for i, s := range t.Entries {
			if topsOnly && waitedFor[i] {
				continue
			}
			if last < 0 || s.Ended > t.Entries[last].Ended ||
				s.Ended == t.Entries[last].Ended && later(s, t.Entries[last]) {
				last = i
			}
		}
		if last >= 0 {
			break
		}
	}
	return last
}

// later breaks a tie between two spans that ended at the same time: by the
// board's order, a locked one last (of two locked ones, the later added).
func later(s, than Span) bool {
	switch {
	case s.Order == 0:
		return true
	case than.Order == 0:
		return false
	}
	return s.Order > than.Order
}

// A Chain is a critical chain: an entry first, then its critical input,
// and so on back to an entry that waited for nothing (or, on a stalled
// board, for a gate that is still locked).
type Chain []Span

// String prints the chain as systemd-analyze critical-chain does: "@"
// when each link opened, relative to the board's start, "+" how long it
// took after its own critical input opened (left out when nothing):
//
//	workers @2.41s +10ms
//	└─api-port @2.4s +5ms
//	  └─stable @2.395s
//	    └─upgrade @2.395s +1.2s
//	      └─serving @1.195s +1.195s
//
// A failed link reads "lease failed @1s +1s: no quorum"; a locked one
// "upgrade locked +12s (running upgrade steps)". Names, Details and causes
// are printed as Report.String prints them, each on its link's line.
func (c Chain) String() string {
	var sb strings.Builder
	for i, s := range c {
		if i > 0 {
			sb.WriteString(strings.Repeat("  ", i-1))
			sb.WriteString("└─")
		}
		sb.WriteString(s.String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

// String prints the span as a line of a Chain does: "api-port @2.4s +5ms",
// "lease failed @1s +1s: no quorum", "upgrade locked +12s (running
// upgrade steps)".
func (s Span) String() string { return printable.Name(s.Name) + s.times() }

// times is what follows a span's name in a chain: " @1s +200ms",
// " failed @1s +1s: no quorum", " locked +12s (running upgrade steps)".
func (s Span) times() string {
	var took string
	if s.Took > 0 {
		took = " +" + printable.Duration(s.Took)
	}
	switch s.State {
	case StateLocked:
		if s.Detail != "" {
			return " locked" + took + " (" + printable.Text(s.Detail) + ")"
		}
		return " locked" + took
	case StateFailed:
		return fmt.Sprintf(" failed @%s%s: %s", printable.Duration(s.Ended), took, causeText(s.Err))
	}
	return " @" + printable.Duration(s.Ended) + took
}
