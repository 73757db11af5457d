package gate_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

// forged is what a hostile name, cause or Detail tries to write: lines of
// its own in a report or a chain printed for people.
const forged = "\n[+]forged ok\r\n"

// assertOneLine fails if text, printed for people as lines lines, has
// any other line break, a control character, or a megabyte echoed whole.
func assertOneLine(t *testing.T, what, text string, lines int) {
	t.Helper()
	assert.Equal(t, lines, strings.Count(text, "\n")+1, "%s: %.300q", what, text)
	assert.False(t, strings.ContainsAny(text, "\r\x00"), "%s: %.300q", what, text)
	assert.Less(t, len(text), 8<<10, "%s: a megabyte echoed whole", what)
}

// The package's own text — Report.String (one line, for logs), a Chain
// (a line per link), a Lock's String and a FailedError — shows names,
// causes and Details as the board's viewers do: printable, each on its
// line, bounded.
func TestTextOfABoardKeepsOutsideTextOnItsLine(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	defer b.Close()
	named := add(b, "a"+forged)
	add(b, strings.Repeat("n", 1<<20)).After(named).Fail(errors.New("no"))
	failed := add(b, "lease").After(named)
	failed.Fail(errors.New("x" + forged + strings.Repeat("c", 1<<20)))
	b.Follow("component", newComponent("d"+forged))

	assertOneLine(t, "Report.String", b.Report().String(), 1)
	tl := b.Timeline()
	for _, s := range tl.Entries {
		chain := tl.CriticalChain(s.Name).String()
		assertOneLine(t, "the chain of "+s.Name[:min(len(s.Name), 20)], strings.TrimSuffix(chain, "\n"), strings.Count(chain, "└─")+1)
	}
	assertOneLine(t, "Lock.String", failed.String(), 1)
	assertOneLine(t, "Lock.String", named.String(), 1)
	// An error is the program's, not a line for people: it keeps its
	// cause's text as it came (its name, quoted, is bounded).
	assert.ErrorContains(t, failed.Err(), "x"+forged)
	assert.Less(t, len(b.Report()[1].Err.Error()), 8<<10, "no name echoed whole")
}

// The incident: two entries of one name were both taken; the timeline,
// the critical chain and the metrics saw only the first, and ?exclude=
// excluded both. Then a second of a name panicked. A name is on a board
// once: a second is put on the board as a failed entry under a name of its
// own, so readiness, the timeline and the metrics show the mistake, loudly,
// and the board never reads ready; nothing panics, and the first entry is
// untouched.
func TestBoardFailsAnEntryUnderANameItHasAlready(t *testing.T) {
	logs := logtest.New()
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Name: "c0", Clock: clk, Logger: logs.Logger()})
	defer b.Close()
	port := add(b, "api-port")
	other := gate.New("api-port")
	assert.NotPanics(t, func() { b.Add("api-port", other) })
	c := newComponent("opens once stable")
	var followed *gate.Lock
	assert.NotPanics(t, func() { followed = b.Follow("api-port", c) })
	add(b, "api-port (2)") // a name the board gave a duplicate is taken too

	r := b.Report()
	require.Len(t, r, 4)
	assert.Equal(t, []string{"api-port", "api-port (2)", "api-port (3)", "api-port (2) (2)"},
		[]string{r[0].Name, r[1].Name, r[2].Name, r[3].Name})
	assert.Equal(t, gate.StateLocked, r[0].State, "the entry that had the name is untouched")
	for i, want := range []string{
		`gate "api-port (2)" failed: gate: duplicate entry name "api-port" on board "c0": a name is on a board once`,
		`gate "api-port (3)" failed: gate: duplicate entry name "api-port" on board "c0": a name is on a board once`,
		`gate "api-port (2) (2)" failed: gate: duplicate entry name "api-port (2)" on board "c0": a name is on a board once`,
	} {
		e := r[i+1]
		assert.Equal(t, gate.StateFailed, e.State, e.Name)
		assert.EqualError(t, e.Err, want)
		assert.ErrorIs(t, e.Err, gate.ErrDuplicateName)
		assert.ErrorIs(t, e.Err, gate.ErrFailed)
	}

	// Follow returns the failed entry's gate: it never opens, and what is
	// built on it fails and says why.
	assert.Equal(t, "api-port (3)", followed.Name())
	assert.ErrorIs(t, followed.Err(), gate.ErrDuplicateName)
	stable := gate.AllOf("stable", port, followed)
	assert.ErrorIs(t, gate.Wait(context.Background(), stable), gate.ErrDuplicateName)
	// Neither the duplicate's Waiter nor its Component is followed.
	close(c.completed)
	other.Unlock()
	port.Unlock()
	r = b.Report()
	assert.Equal(t, gate.StateUnlocked, r[0].State)
	assert.Equal(t, gate.StateFailed, r[1].State)
	assert.Equal(t, gate.StateFailed, r[2].State)
	assert.False(t, followed.IsUnlocked())

	// The timeline shows them, and the log says so at Warn.
	tl := b.Timeline()
	require.Len(t, tl.Entries, 4)
	assert.Equal(t, "api-port (3)", tl.Entries[2].Name)
	assert.ErrorIs(t, tl.Entries[2].Err, gate.ErrDuplicateName)
	failed := logs.Matching("gate failed")
	require.Len(t, failed, 3)
	assert.Equal(t, slog.LevelWarn, failed[0].Level)
	assert.Equal(t, "api-port (2)", failed[0].Str("gate"))

	// Another name, and the same gate under another name, are fine.
	l := add(b, "stable")
	b.Add("stable-again", l)
	assert.Len(t, b.Report(), 6)
	assert.NoError(t, l.Err())

	// An unnamed board names no board.
	u := gate.NewBoard(gate.BoardConfig{})
	defer u.Close()
	add(u, "x")
	assert.EqualError(t, u.Follow("x", newComponent("")).Err(), `gate "x (2)" failed: gate: duplicate entry name "x": a name is on a board once`)
}
