package boardview

import (
	"errors"
	"slices"
	"strconv"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// Every answer is drawn from a Report or Timeline passed through
// shownReport or shownTimeline first; decisions (?exclude, ?gate, ready)
// are made on the board's own names, before (gate/DESIGN.md, "Shown").

// shownReport returns r as it is shown: its names, Details and causes
// printable and bounded. A failed entry's Err is then a *gate.FailedError
// whose cause has the shown text only. A report that needs nothing is
// returned as it is, without a copy.
func shownReport(r gate.Report) gate.Report {
	out := r
	for i, e := range r {
		name, detail, err, changed := shown(e.Name, e.Detail, e.Err)
		if !changed {
			continue
		}
		if &out[0] == &r[0] {
			out = slices.Clone(r)
		}
		out[i].Name, out[i].Detail, out[i].Err = name, detail, err
	}
	return out
}

// shownTimeline returns t as it is shown, as shownReport does.
func shownTimeline(t gate.Timeline) gate.Timeline {
	t.Board = printable.Name(t.Board)
	entries := t.Entries
	for i, s := range t.Entries {
		name, detail, err, changed := shown(s.Name, s.Detail, s.Err)
		if !changed {
			continue
		}
		if &entries[0] == &t.Entries[0] {
			entries = slices.Clone(t.Entries)
		}
		entries[i].Name, entries[i].Detail, entries[i].Err = name, detail, err
	}
	t.Entries = entries
	return t
}

// shown returns an entry's name, Detail and failure as they are shown,
// and whether any of them is not as it was.
func shown(name, detail string, failure error) (string, string, error, bool) {
	shownName, shownDetail := printable.Name(name), printable.Text(detail)
	changed := shownName != name || shownDetail != detail
	if failure != nil {
		text := cause(failure).Error()
		if shownText := printable.Text(text); shownText != text || shownName != name {
			failure, changed = &gate.FailedError{Name: shownName, Err: errors.New(shownText)}, true
		}
	}
	return shownName, shownDetail, failure, changed
}

// shownQuery is a value from the request's query, quoted, as an answer
// echoes it.
func shownQuery(v string) string { return strconv.Quote(printable.Name(v)) }
