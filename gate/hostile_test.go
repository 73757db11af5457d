package gate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
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
// excluded both. A name is on a board once; a second is refused, as
// http.ServeMux refuses a pattern registered twice.
func TestBoardRefusesANameItHasAlready(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	defer b.Close()
	add(b, "api-port")
	want := `gate.Board.Add("api-port"): the board has an entry of that name already (a name is on a board once: readiness, timelines and metrics find an entry by its name)`
	assert.PanicsWithValue(t, want, func() { b.Add("api-port", gate.New("api-port")) })
	want = `gate.Board.Follow("api-port"): the board has an entry of that name already (a name is on a board once: readiness, timelines and metrics find an entry by its name)`
	assert.PanicsWithValue(t, want, func() { b.Follow("api-port", newComponent("")) })
	require.Len(t, b.Report(), 1, "nothing was added")

	// Another name, and the same gate under another name, are fine.
	l := add(b, "stable")
	b.Add("stable-again", l)
	assert.Len(t, b.Report(), 3)
}
