package boardview

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// WriteTrace writes timelines as one Chrome trace-event file (object form,
// for Perfetto and chrome://tracing): timeline i is process i+1, named by
// its Board (else "board N"); each entry a thread with one "X" event from
// added to ended (the End while locked), its state, times, inputs, detail
// and error in args. The board's critical chain has category
// "gate,critical" and a first track, "critical chain", of each link's "+".
// Timestamps are wall-clock microseconds (Start plus the offsets), so
// boards of several processes line up (see MergeTraces).
func WriteTrace(w io.Writer, timelines ...gate.Timeline) error {
	return writeTrace(w, ownLanes(timelines))
}

// traceEvent is one event of the trace-event format. Every event has
// name, ph, ts, pid and tid; a complete event ("X") has dur too.
type traceEvent struct {
	Name string     `json:"name"`
	Cat  string     `json:"cat,omitempty"`
	Ph   string     `json:"ph"`
	Ts   float64    `json:"ts"`            // µs since the Unix epoch
	Dur  *float64   `json:"dur,omitempty"` // µs; "X" events only
	Pid  int        `json:"pid"`
	Tid  int        `json:"tid"`
	Args *traceArgs `json:"args,omitempty"`
}

// traceArgs are a trace event's args: a metadata event's name or sort
// index, or an entry's state and story.
type traceArgs struct {
	Name      string   `json:"name,omitempty"`
	SortIndex *int     `json:"sort_index,omitempty"`
	State     string   `json:"state,omitempty"`
	Added     string   `json:"added,omitempty"`
	Ended     string   `json:"ended,omitempty"`
	Took      string   `json:"took,omitempty"`
	Order     int      `json:"order,omitempty"`
	After     []string `json:"after,omitempty"`
	Critical  string   `json:"critical,omitempty"`
	OnChain   bool     `json:"critical_chain,omitempty"`
	Detail    string   `json:"detail,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// traceFile is the trace-event format's JSON object form.
type traceFile struct {
	TraceEvents     []traceEvent `json:"traceEvents"`
	DisplayTimeUnit string       `json:"displayTimeUnit"`
}

// writeTrace writes lanes as a trace; see WriteTrace.
func writeTrace(w io.Writer, lanes []lane) error {
	n := 0
	for _, l := range lanes {
		n += 5 + 3*len(l.t.Entries)
	}
	file := traceFile{TraceEvents: make([]traceEvent, 0, n), DisplayTimeUnit: "ms"}
	tid := 1
	for k, l := range lanes {
		file.TraceEvents, tid = appendLane(file.TraceEvents, k+1, tid, laneName(l.t, k), l)
	}
	body, err := json.Marshal(file)
	if err != nil { // cannot happen: strings and numbers only
		return err
	}
	_, err = w.Write(append(body, '\n'))
	return err
}

// micros returns t plus d as microseconds since the Unix epoch, to the
// nanosecond.
func micros(t time.Time, d time.Duration) float64 {
	at := t.Add(d)
	return float64(at.Unix())*1e6 + float64(at.Nanosecond())/1e3
}

func durMicros(d time.Duration) *float64 {
	us := float64(max(d, 0)) / 1e3
	return &us
}

func sortIndex(i int) *int { return &i }

// appendLane appends the events of one board, as process pid, its tracks
// numbered from tid on (unique in the file, for Perfetto), and returns the
// next thread id.
func appendLane(events []traceEvent, pid, tid int, name string, l lane) ([]traceEvent, int) {
	t := l.t
	start := micros(t.Start, 0)
	first := tid // the process's metadata goes on its first track
	meta := func(tid int, what string, args traceArgs) {
		events = append(events, traceEvent{Name: what, Ph: "M", Ts: start, Pid: pid, Tid: tid, Args: &args})
	}
	meta(first, "process_name", traceArgs{Name: name})
	meta(first, "process_sort_index", traceArgs{SortIndex: sortIndex(pid)})
	onChain := l.marks()
	if len(l.chains) > 0 {
		chainTid := tid
		tid++
		meta(chainTid, "thread_name", traceArgs{Name: "critical chain"})
		meta(chainTid, "thread_sort_index", traceArgs{SortIndex: sortIndex(0)})
		// The chain's links, its oldest first: each for its own "+".
		for _, c := range l.chains {
			for k := len(c) - 1; k >= 0; k-- {
				s := t.Entries[c[k]]
				events = append(events, traceEvent{
					Name: s.Name, Cat: "critical", Ph: "X",
					Ts: micros(t.Start, s.Ended-s.Took), Dur: durMicros(s.Took),
					Pid: pid, Tid: chainTid,
					Args: &traceArgs{State: s.State.String(), Ended: "@" + printable.Duration(s.Ended), Took: "+" + printable.Duration(s.Took), Error: errText(s.Err)},
				})
			}
		}
	}
	for i, s := range t.Entries {
		tid := tid + i
		meta(tid, "thread_name", traceArgs{Name: s.Name})
		meta(tid, "thread_sort_index", traceArgs{SortIndex: sortIndex(i + 1)})
		args := &traceArgs{
			State: s.State.String(), Added: "@" + printable.Duration(s.Added), Ended: "@" + printable.Duration(s.Ended), Took: "+" + printable.Duration(s.Took),
			Order: s.Order, OnChain: onChain[i], Detail: s.Detail, Error: errText(s.Err),
		}
		args.After, args.Critical = links(t, s)
		cat := "gate"
		if onChain[i] {
			cat = "gate,critical"
		}
		events = append(events, traceEvent{
			Name: s.Name, Cat: cat, Ph: "X",
			Ts: micros(t.Start, s.Added), Dur: durMicros(s.Ended - s.Added),
			Pid: pid, Tid: tid, Args: args,
		})
	}
	return events, tid + len(t.Entries)
}

// errText is a failed entry's cause as text, or "".
func errText(err error) string {
	if err == nil {
		return ""
	}
	return cause(err).Error()
}

// MergeTraces writes the trace files read from traces (object form,
// {"traceEvents": [...]}, or array form) as one object-form file. Events
// are kept as they are, in the order given, except that each file's
// process and thread ids are renumbered so no two files share one, and
// each process's sort index follows its new id. Timestamps are untouched
// (WriteTrace's are on the wall clock already).
func MergeTraces(w io.Writer, traces ...io.Reader) error {
	var (
		out              []json.RawMessage
		nextPid, nextTid = 1, 1
	)
	for f, r := range traces {
		events, err := readTraceEvents(r)
		if err != nil {
			return fmt.Errorf("trace %d: %w", f+1, err)
		}
		// This file's ids (as JSON) → the merged ones.
		pids, tids := map[string]int{}, map[string]int{}
		renumber := func(ids map[string]int, next *int, old json.RawMessage) json.RawMessage {
			id, seen := ids[string(old)]
			if !seen {
				id = *next
				*next++
				ids[string(old)] = id
			}
			return json.RawMessage(strconv.Itoa(id))
		}
		for i, raw := range events {
			var ev map[string]json.RawMessage
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("trace %d: event %d: %w", f+1, i, err)
			}
			old, ok := ev["pid"]
			if !ok {
				out = append(out, raw) // a global event: no process to renumber
				continue
			}
			ev["pid"] = renumber(pids, &nextPid, old)
			pid := string(ev["pid"])
			if tid, ok := ev["tid"]; ok {
				ev["tid"] = renumber(tids, &nextTid, tid)
			}
			if string(ev["name"]) == `"process_sort_index"` {
				ev["args"] = json.RawMessage(`{"sort_index":` + pid + `}`)
			}
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			out = append(out, b)
		}
	}
	var buf bytes.Buffer
	buf.WriteString(`{"traceEvents":[`)
	for i, ev := range out {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(ev)
	}
	buf.WriteString("],\"displayTimeUnit\":\"ms\"}\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// errNotATrace is a file that is neither of the trace-event format's forms.
var errNotATrace = errors.New(`not a trace: want {"traceEvents": [...]} or [...]`)

// readTraceEvents returns the events of a trace file in either form.
func readTraceEvents(r io.Reader) ([]json.RawMessage, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errNotATrace
	}
	if body[0] == '[' {
		// The array form may leave out its closing bracket, so that a
		// tracer can append events until it stops.
		if body[len(body)-1] != ']' {
			body = append(bytes.TrimRight(body, ", \n\r\t"), ']')
		}
		var events []json.RawMessage
		if err := json.Unmarshal(body, &events); err != nil {
			return nil, fmt.Errorf("%w: %v", errNotATrace, err)
		}
		return events, nil
	}
	var file struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err := json.Unmarshal(body, &file); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotATrace, err)
	}
	if file.TraceEvents == nil {
		return nil, errNotATrace
	}
	return file.TraceEvents, nil
}
