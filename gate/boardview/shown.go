package boardview

import (
	"errors"
	"strconv"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// What boardview prints of a board — entry and board names, Details,
// causes — is text from outside: an error's message, a component's words,
// a name read back from another process. Every answer (readiness text and
// JSON, the timeline as text, JSON, SVG and trace events) is drawn from a
// Report or Timeline that has passed through shownReport or shownTimeline
// first, so each such string is one printable line (control characters
// replaced: a newline in a cause once wrote "[+]forged ok" into
// /readyz?verbose as a check of its own) of bounded length (names
// printable.MaxName bytes, Details and causes printable.MaxText, cut with
// "…": a megabyte name was echoed whole into every answer). Decisions —
// which entry ?exclude or ?gate names, whether the board is ready — are
// made on the board's own names, before anything is shown.

// shownReport returns r as it is shown: its names, Details and causes
// printable and bounded. A failed entry's Err is a *gate.FailedError whose
// cause has the shown text only.
func shownReport(r gate.Report) gate.Report {
	out := make(gate.Report, len(r))
	for i, e := range r {
		e.Name, e.Detail, e.Err = printable.Name(e.Name), printable.Text(e.Detail), shownErr(e.Name, e.Err)
		out[i] = e
	}
	return out
}

// shownTimeline returns t as it is shown, as shownReport does.
func shownTimeline(t gate.Timeline) gate.Timeline {
	t.Board = printable.Name(t.Board)
	entries := make([]gate.Span, len(t.Entries))
	for i, s := range t.Entries {
		s.Name, s.Detail, s.Err = printable.Name(s.Name), printable.Text(s.Detail), shownErr(s.Name, s.Err)
		entries[i] = s
	}
	t.Entries = entries
	return t
}

// shownErr is a failed entry's error as it is shown.
func shownErr(name string, err error) error {
	if err == nil {
		return nil
	}
	text := cause(err).Error()
	if shown := printable.Text(text); shown != text || printable.Name(name) != name {
		return &gate.FailedError{Name: printable.Name(name), Err: errors.New(shown)}
	}
	return err
}

// shownQuery is a value from the request's query, quoted, as an answer
// echoes it.
func shownQuery(v string) string { return strconv.Quote(printable.Name(v)) }
