package boardview

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coldstart-go/coldstart/gate"
)

// TimelineHandler serves b's Timeline, answering 200 to every request it
// understands (gate/README.md lists each answer's fields):
//
//   - by default, text: the board's critical chain (Timeline.CriticalChain
//     with ""), printed as systemd-analyze critical-chain prints a unit's;
//
//   - ?gate=name (repeatable): those entries' chains instead, one after
//     the other (404 for a name on no entry);
//
//   - ?format=json, or "Accept: application/json": the whole timeline, and
//     "chains", the names on each chain asked for (see ReadTimeline);
//
//   - ?format=svg, or "Accept: image/svg+xml": a plain SVG picture;
//
//   - ?format=trace: Chrome trace events (see WriteTrace).
//
// The chains asked for are marked. It never blocks: each request reads a
// Timeline.
func TimelineHandler(b *gate.Board) http.Handler { return timelineHandler{b} }

type timelineHandler struct{ b *gate.Board }

func (h timelineHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	format, ok := timelineFormat(query.Get("format"), r.Header.Values("Accept"))
	if !ok {
		plain(w, http.StatusBadRequest, fmt.Sprintf("format %s (must be text, json, svg or trace)\n", shownQuery(query.Get("format"))))
		return
	}
	t := h.b.Timeline()
	names := query["gate"]
	if len(names) == 0 {
		names = []string{""} // the board's own chain
	}
	var chains [][]int // each chain asked for, as indexes into t.Entries
	for _, name := range names {
		at := t.Index(name)
		if at < 0 && name != "" {
			plain(w, http.StatusNotFound, fmt.Sprintf("no gate %s on the board\n", shownQuery(name)))
			return
		}
		if at >= 0 {
			chains = append(chains, chainFrom(t, at))
		}
	}
	t = shownTimeline(t) // the chains are found: from here on, only shown
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch format {
	case "json":
		body, err := json.Marshal(timelineJSON(t, chains))
		if err != nil { // cannot happen: strings and ints only
			plain(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(body, '\n'))
	case "svg":
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Write(timelineSVG([]lane{{t: t, chains: chains}}))
	case "trace":
		w.Header().Set("Content-Type", "application/json")
		writeTrace(w, []lane{{t: t, chains: chains}})
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeChains(w, t, chains)
	}
}

// timelineFormat picks the answer's format: ?format if given (ok false if
// it names none), else whichever of JSON, SVG and text Accept weighs
// highest (q), else text. Trace events have no media type of their own:
// only ?format=trace asks for them.
func timelineFormat(format string, accept []string) (_ string, ok bool) {
	switch format {
	case "text", "json", "svg", "trace":
		return format, true
	case "":
	default:
		return "", false
	}
	switch acceptable(accept, "application/json", "image/svg+xml", "text/plain") {
	case "application/json":
		return "json", true
	case "image/svg+xml":
		return "svg", true
	}
	return "text", true
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// writeChains is the text answer: systemd-analyze's legend, then each
// chain.
func writeChains(w io.Writer, t gate.Timeline, chains [][]int) {
	if len(chains) == 0 {
		io.WriteString(w, "no gates on the board\n")
		return
	}
	io.WriteString(w, "The time when a gate opened or failed is printed after the \"@\" character.\n"+
		"The time it took after the input it waited for last is printed after the \"+\" character.\n")
	for _, c := range chains {
		io.WriteString(w, "\n"+spans(t, c).String())
	}
}

// spanJSON is a Span on the wire.
type spanJSON struct {
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Added    string   `json:"added"`
	Ended    string   `json:"ended"`
	Took     string   `json:"took"`
	Order    int      `json:"order,omitempty"`
	After    []string `json:"after,omitempty"`
	Critical string   `json:"critical,omitempty"`
	Detail   string   `json:"detail,omitempty"`
	Error    string   `json:"error,omitempty"`
}

type timelineBody struct {
	Board   string     `json:"board,omitempty"`
	Start   string     `json:"start"` // RFC 3339
	End     string     `json:"end"`
	Entries []spanJSON `json:"entries"`
	Chains  [][]string `json:"chains"`
}

func timelineJSON(t gate.Timeline, chains [][]int) timelineBody {
	out := timelineBody{Board: t.Board, Start: t.Start.Format(time.RFC3339Nano), End: t.End.String(),
		Entries: make([]spanJSON, len(t.Entries)), Chains: make([][]string, len(chains))}
	for i, s := range t.Entries {
		j := spanJSON{Name: s.Name, State: s.State.String(), Added: s.Added.String(), Ended: s.Ended.String(),
			Took: s.Took.String(), Order: s.Order, Detail: s.Detail, Error: errText(s.Err)}
		j.After, j.Critical = links(t, s)
		out.Entries[i] = j
	}
	for i, c := range chains {
		out.Chains[i] = make([]string, len(c))
		for k, at := range c {
			out.Chains[i][k] = t.Entries[at].Name
		}
	}
	return out
}

// links names what s waited for, and its critical input ("" if none).
func links(t gate.Timeline, s gate.Span) (after []string, critical string) {
	for _, a := range s.After {
		after = append(after, t.Entries[a].Name)
	}
	if s.Critical >= 0 {
		critical = t.Entries[s.Critical].Name
	}
	return after, critical
}

// chainFrom returns the indexes of the critical chain that starts at
// t.Entries[at], following Critical (gate.Timeline.CriticalChain's walk).
func chainFrom(t gate.Timeline, at int) []int {
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

// spans returns the entries at the indexes given, as a chain.
func spans(t gate.Timeline, indexes []int) gate.Chain {
	c := make(gate.Chain, len(indexes))
	for k, i := range indexes {
		c[k] = t.Entries[i]
	}
	return c
}

// cause returns the cause inside a gate's failure, for lines that already
// name the gate.
func cause(err error) error {
	if fe, ok := err.(*gate.FailedError); ok {
		return fe.Err
	}
	return err
}

// times is what follows a span's name in a chain: "@1s +200ms".
func times(s gate.Span) string { return s.String()[len(s.Name)+1:] }

// ReadTimeline reads a timeline in the JSON that TimelineHandler serves
// (?format=json), as another process's /timeline answers it, so that
// WriteSVG and WriteTrace can draw it beside this process's boards. What
// the JSON leaves out stays zero: a failed entry's Err is a
// *gate.FailedError whose cause has the served text only.
func ReadTimeline(r io.Reader) (gate.Timeline, error) {
	var body timelineBody
	if err := json.NewDecoder(r).Decode(&body); err != nil {
		return gate.Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	start, err := time.Parse(time.RFC3339Nano, body.Start)
	if err != nil {
		return gate.Timeline{}, fmt.Errorf("timeline: start: %w", err)
	}
	t := gate.Timeline{Board: body.Board, Start: start, Entries: make([]gate.Span, len(body.Entries))}
	if t.End, err = time.ParseDuration(body.End); err != nil {
		return gate.Timeline{}, fmt.Errorf("timeline: end: %w", err)
	}
	index := make(map[string]int, len(body.Entries)) // a name's first entry, as Timeline.Index finds it
	for i, e := range body.Entries {
		if _, dup := index[e.Name]; !dup {
			index[e.Name] = i
		}
	}
	for i, e := range body.Entries {
		s := gate.Span{Name: e.Name, Order: e.Order, Detail: e.Detail, Critical: -1}
		switch e.State {
		case "locked":
			s.State = gate.StateLocked
		case "unlocked":
			s.State = gate.StateUnlocked
		case "failed":
			s.State = gate.StateFailed
			s.Err = &gate.FailedError{Name: e.Name, Err: errors.New(e.Error)}
		default:
			return gate.Timeline{}, fmt.Errorf("timeline: entry %q: state %q (must be locked, unlocked or failed)", e.Name, e.State)
		}
		for _, f := range []struct {
			name string
			text string
			to   *time.Duration
		}{{"added", e.Added, &s.Added}, {"ended", e.Ended, &s.Ended}, {"took", e.Took, &s.Took}} {
			if *f.to, err = time.ParseDuration(f.text); err != nil {
				return gate.Timeline{}, fmt.Errorf("timeline: entry %q: %s: %w", e.Name, f.name, err)
			}
		}
		for _, a := range e.After {
			j, ok := index[a]
			if !ok {
				return gate.Timeline{}, fmt.Errorf("timeline: entry %q: after %q: no entry of that name", e.Name, a)
			}
			s.After = append(s.After, j)
		}
		if e.Critical != "" {
			j, ok := index[e.Critical]
			if !ok {
				return gate.Timeline{}, fmt.Errorf("timeline: entry %q: critical %q: no entry of that name", e.Name, e.Critical)
			}
			s.Critical = j
		}
		t.Entries[i] = s
	}
	return t, nil
}
