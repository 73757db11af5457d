package boardview_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// traceEvent is an event as a viewer reads it, every field optional so
// that the checks below say which one is missing.
type traceEvent map[string]any

// metadataNames are the metadata events the Trace Event Format defines.
var metadataNames = map[string]bool{
	"process_name": true, "process_labels": true, "process_sort_index": true,
	"thread_name": true, "thread_sort_index": true,
}

// checkTrace checks body against the Trace Event Format (the JSON object
// form): a "traceEvents" array and a valid displayTimeUnit; every event
// has a string name and ph, and numeric ts, pid and tid; a complete event
// ("X") has a numeric dur ≥ 0; a metadata event ("M") is one the format
// defines, with its args.name (a string) or args.sort_index (a number).
// It returns the events.
func checkTrace(t *testing.T, body []byte) []traceEvent {
	t.Helper()
	var file map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &file), "a trace is one JSON object")
	var events []traceEvent
	require.NoError(t, json.Unmarshal(file["traceEvents"], &events), "traceEvents is an array of objects")
	require.NotEmpty(t, events)
	if unit, ok := file["displayTimeUnit"]; ok {
		assert.Contains(t, []string{`"ms"`, `"ns"`}, string(unit))
	}
	for i, ev := range events {
		for _, f := range []string{"name", "ph"} {
			assert.IsType(t, "", ev[f], "event %d: %s must be a string: %v", i, f, ev)
		}
		for _, f := range []string{"ts", "pid", "tid"} {
			assert.IsType(t, 0.0, ev[f], "event %d: %s must be a number: %v", i, f, ev)
		}
		switch ev["ph"] {
		case "X":
			dur, ok := ev["dur"].(float64)
			assert.True(t, ok && dur >= 0, "event %d: a complete event needs dur ≥ 0: %v", i, ev)
		case "M":
			assert.True(t, metadataNames[ev["name"].(string)], "event %d: no such metadata event: %v", i, ev)
			args, _ := ev["args"].(map[string]any)
			switch ev["name"] {
			case "process_name", "thread_name":
				assert.IsType(t, "", args["name"], "event %d: %v", i, ev)
			case "process_sort_index", "thread_sort_index":
				assert.IsType(t, 0.0, args["sort_index"], "event %d: %v", i, ev)
			}
		default:
			t.Errorf("event %d: phase %v: want X or M", i, ev["ph"])
		}
	}
	return events
}

// micros is t as the trace's timestamps count: µs since the Unix epoch.
func micros(t time.Time) float64 { return float64(t.UnixNano()) / 1e3 }

// complete returns the complete events on the process pid's thread tid
// (-1: any), by name.
func complete(events []traceEvent, pid, tid float64) map[string]traceEvent {
	out := map[string]traceEvent{}
	for _, ev := range events {
		if ev["ph"] == "X" && ev["pid"] == pid && (tid < 0 || ev["tid"] == tid) {
			out[ev["name"].(string)] = ev
		}
	}
	return out
}

// threadNames returns process pid's thread names by tid.
func threadNames(events []traceEvent, pid float64) map[float64]string {
	out := map[float64]string{}
	for _, ev := range events {
		if ev["ph"] == "M" && ev["name"] == "thread_name" && ev["pid"] == pid {
			out[ev["tid"].(float64)] = ev["args"].(map[string]any)["name"].(string)
		}
	}
	return out
}

func processNames(events []traceEvent) map[float64]string {
	out := map[float64]string{}
	for _, ev := range events {
		if ev["ph"] == "M" && ev["name"] == "process_name" {
			out[ev["pid"].(float64)] = ev["args"].(map[string]any)["name"].(string)
		}
	}
	return out
}

// isChainTrack returns whether an event is on a "critical chain" track.
func isChainTrack(events []traceEvent) func(traceEvent) bool {
	tracks := map[[2]float64]bool{}
	for _, ev := range events {
		if ev["ph"] == "M" && ev["name"] == "thread_name" && ev["args"].(map[string]any)["name"] == "critical chain" {
			tracks[[2]float64{ev["pid"].(float64), ev["tid"].(float64)}] = true
		}
	}
	return func(ev traceEvent) bool { return tracks[[2]float64{ev["pid"].(float64), ev["tid"].(float64)}] }
}

// entryTrack returns the tid of process pid's track named name.
func entryTrack(t *testing.T, events []traceEvent, pid float64, name string) float64 {
	t.Helper()
	for tid, n := range threadNames(events, pid) {
		if n == name {
			return tid
		}
	}
	t.Fatalf("process %v has no track %q", pid, name)
	return 0
}

// A board with open, failed and locked entries exports each as such: a
// bar from added to opened or failed (or, still locked, to the time the
// timeline was taken), its state and cause in args, on the wall clock.
func TestWriteTraceExportsEachEntryAsItStands(t *testing.T) {
	b, clk := controllerBoard(t, gate.BoardConfig{Name: "c0"})
	add(b, "mongo").Fail(errors.New("no quorum")) // @3s
	clk.Advance(500 * ms)
	add(b, "backup") // locked from @3.5s
	clk.Advance(time.Second)
	tl := b.Timeline() // taken @4.5s

	var buf bytes.Buffer
	require.NoError(t, boardview.WriteTrace(&buf, tl))
	events := checkTrace(t, buf.Bytes())
	assert.Equal(t, map[float64]string{1: "c0"}, processNames(events))
	names := threadNames(events, 1)
	want := []string{"critical chain"}
	for _, s := range tl.Entries {
		want = append(want, s.Name) // one track per entry, in board order
	}
	var got []string
	for tid := 1.0; tid <= float64(len(names)); tid++ {
		got = append(got, names[tid])
	}
	assert.Equal(t, want, got)
	onChainTrack := isChainTrack(events)

	entries := map[string]traceEvent{}
	for _, ev := range events {
		if ev["ph"] == "X" && !onChainTrack(ev) {
			entries[ev["name"].(string)] = ev
		}
	}
	require.Len(t, entries, len(tl.Entries))
	for _, tc := range []struct {
		name       string
		from, to   time.Duration
		state, err string
		chain      bool
	}{
		{"serving", 0, 800 * ms, "unlocked", "", false},
		{"upgrade", 100 * ms, 2 * time.Second, "unlocked", "", false},
		{"metrics", 0, 300 * ms, "unlocked", "", false},
		{"mongo", 3 * time.Second, 3 * time.Second, "failed", "no quorum", false},
		// Still locked, it is what the board waits on now: its own chain.
		{"backup", 3500 * ms, 4500 * ms, "locked", "", true},
	} {
		ev := entries[tc.name]
		args := ev["args"].(map[string]any)
		assert.InDelta(t, micros(t0.Add(tc.from)), ev["ts"], 0.5, "%s starts when it was added, on the wall clock", tc.name)
		assert.InDelta(t, float64(tc.to-tc.from)/1e3, ev["dur"], 0.01, "%s ends when it resolved (locked: when taken)", tc.name)
		assert.Equal(t, tc.state, args["state"], tc.name)
		if tc.err != "" {
			assert.Equal(t, tc.err, args["error"], tc.name)
		} else {
			assert.NotContains(t, args, "error", tc.name)
		}
		assert.Equal(t, tc.chain, args["critical_chain"] == true, "%s on the chain", tc.name)
		assert.Equal(t, tc.chain, strings.Contains(ev["cat"].(string), "critical"), "%s's category", tc.name)
	}
	assert.Equal(t, []any{"serving", "self-dial", "upgrade", "lease"}, entries["stable"]["args"].(map[string]any)["after"])
	assert.Equal(t, "upgrade", entries["stable"]["args"].(map[string]any)["critical"])

	assert.Equal(t, []string{"backup"}, chainTrack(t, events))

	// Once nothing is locked, the chain runs back through what opened
	// last: its own track has a link per entry on it, oldest first, each
	// for its own "+", one after the other.
	b, _ = controllerBoard(t, gate.BoardConfig{Name: "c0"})
	buf.Reset()
	require.NoError(t, boardview.WriteTrace(&buf, b.Timeline()))
	events = checkTrace(t, buf.Bytes())
	assert.Equal(t, []string{"serving", "upgrade", "stable", "api-port", "workers"}, chainTrack(t, events))
	onChainTrack = isChainTrack(events)
	for _, ev := range events {
		if ev["ph"] == "X" && !onChainTrack(ev) {
			onChain := map[string]bool{"serving": true, "upgrade": true, "stable": true, "api-port": true, "workers": true}[ev["name"].(string)]
			assert.Equal(t, onChain, ev["cat"] == "gate,critical", "%s's category", ev["name"])
		}
	}
}

// chainTrack returns the names on process 1's "critical chain" track,
// checking that each link starts where the one before it ended.
func chainTrack(t *testing.T, events []traceEvent) []string {
	t.Helper()
	var chain []string
	var ends float64
	onChainTrack := isChainTrack(events)
	for _, ev := range events {
		if ev["ph"] == "X" && onChainTrack(ev) {
			chain = append(chain, ev["name"].(string))
			if len(chain) > 1 {
				assert.InDelta(t, ends, ev["ts"], 0.5, "%s starts where its input ended", ev["name"])
			}
			ends = ev["ts"].(float64) + ev["dur"].(float64)
		}
	}
	return chain
}

// Traces written by separate processes merge into one file on one time
// axis: each keeps its processes, renumbered apart, and its timestamps.
func TestMergeTracesLinesUpProcesses(t *testing.T) {
	var files [3]bytes.Buffer
	for i, name := range []string{"c0", "c1", "c2"} {
		clk := testclock.NewClock(t0.Add(time.Duration(i) * 250 * ms)) // each process starts later
		b := gate.NewBoard(gate.BoardConfig{Name: name, Clock: clk})
		serving := add(b, "serving")
		clk.Advance(800 * ms)
		serving.Unlock()
		require.NoError(t, boardview.WriteTrace(&files[i], b.Timeline()), "each process writes its own file, as process 1")
	}
	// The array form, its closing bracket left out as a tracer may.
	third := checkTrace(t, files[2].Bytes())
	var arr bytes.Buffer
	arr.WriteString("[")
	for i, ev := range third {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		if i > 0 {
			arr.WriteString(",\n")
		}
		arr.Write(b)
	}

	var merged bytes.Buffer
	require.NoError(t, boardview.MergeTraces(&merged, &files[0], &files[1], &arr))
	events := checkTrace(t, merged.Bytes())
	assert.Equal(t, map[float64]string{1: "c0", 2: "c1", 3: "c2"}, processNames(events))
	for pid := 1.0; pid <= 3; pid++ {
		serving := complete(events, pid, entryTrack(t, events, pid, "serving"))["serving"]
		require.NotNil(t, serving, "process %v", pid)
		assert.InDelta(t, micros(t0.Add(time.Duration(pid-1)*250*ms)), serving["ts"], 0.5, "process %v's timestamps are kept", pid)
		for _, ev := range events {
			if ev["name"] == "process_sort_index" && ev["pid"] == pid {
				assert.Equal(t, pid, ev["args"].(map[string]any)["sort_index"], "the boards in the order of the files")
			}
		}
	}

	// No two processes share a thread id: a viewer that keys threads by
	// their id alone keeps them apart.
	owner := map[float64]float64{}
	for _, ev := range events {
		tid, pid := ev["tid"].(float64), ev["pid"].(float64)
		if p, ok := owner[tid]; ok {
			assert.Equal(t, p, pid, "thread %v is in one process", tid)
		}
		owner[tid] = pid
	}

	err := boardview.MergeTraces(&bytes.Buffer{}, strings.NewReader(`{"events": []}`))
	assert.ErrorContains(t, err, "trace 1: not a trace")
}

// The JSON a /timeline serves reads back as the timeline it was made of,
// so a picture can be drawn from other processes' answers.
func TestReadTimelineReadsWhatTheHandlerServes(t *testing.T) {
	b, clk := controllerBoard(t, gate.BoardConfig{Name: "c1"})
	add(b, "mongo").Fail(errors.New("no quorum"))
	c := newComponent("running upgrade steps")
	b.Follow("late-upgrade", c)
	defer b.Close()
	clk.Advance(time.Second)
	want := b.Timeline()

	rec := getTimeline(t, b, "/timeline?format=json", "")
	require.Equal(t, http.StatusOK, rec.Code)
	got, err := boardview.ReadTimeline(rec.Body)
	require.NoError(t, err)

	assert.Equal(t, "c1", got.Board)
	assert.True(t, want.Start.Equal(got.Start))
	assert.Equal(t, want.End, got.End)
	require.Len(t, got.Entries, len(want.Entries))
	for i, w := range want.Entries {
		g := got.Entries[i]
		assert.Equal(t, w.String(), g.String(), "entry %d reads as it printed", i)
		assert.Equal(t, w.After, g.After, w.Name)
		assert.Equal(t, w.Critical, g.Critical, w.Name)
		assert.Equal(t, w.Order, g.Order, w.Name)
	}
	assert.Equal(t, want.CriticalChain("").String(), got.CriticalChain("").String())
	var fe *gate.FailedError
	require.ErrorAs(t, got.Entries[8].Err, &fe)
	assert.Equal(t, "mongo", fe.Name)

	for _, bad := range []string{`{`, `{"start": "yesterday", "end": "1s"}`,
		`{"start": "2026-11-30T01:00:00Z", "end": "1s", "entries": [{"name": "a", "state": "open", "added": "0s", "ended": "0s", "took": "0s"}]}`,
		`{"start": "2026-11-30T01:00:00Z", "end": "1s", "entries": [{"name": "a", "state": "locked", "added": "0s", "ended": "1s", "took": "1s", "after": ["b"]}]}`,
	} {
		_, err := boardview.ReadTimeline(strings.NewReader(bad))
		assert.ErrorContains(t, err, "timeline", bad)
	}
}

// Several boards on one time axis: a swimlane per board, headed by its
// name, each lane placed by when its board started.
func TestWriteSVGDrawsBoardsAsSwimlanes(t *testing.T) {
	var timelines []gate.Timeline
	for i, name := range []string{"c0", "c1", "c2"} {
		clk := testclock.NewClock(t0.Add(time.Duration(i) * 500 * ms))
		b := gate.NewBoard(gate.BoardConfig{Name: name, Clock: clk})
		serving, lease := add(b, "serving"), add(b, "lease")
		put(b, gate.AllOf("stable", serving, lease))
		clk.Advance(time.Second)
		serving.Unlock()
		if i == 2 {
			lease.Fail(errors.New("no quorum"))
		} else {
			clk.Advance(200 * ms)
			lease.Unlock()
		}
		timelines = append(timelines, b.Timeline())
	}
	var buf bytes.Buffer
	require.NoError(t, boardview.WriteSVG(&buf, timelines...))
	bars, text := parseSVG(t, buf.Bytes())
	require.Len(t, bars, 9, "a bar per entry of every board")
	for _, name := range []string{"c0", "c1", "c2"} {
		assert.Contains(t, text, name, "each lane is named")
	}
	assert.Contains(t, text, "startup timeline: 3 boards, 9 gates")
	assert.Contains(t, text, "started +500ms; critical chain: stable (@1.2s)")
	servingStart := map[string]float64{}
	for i, bar := range bars {
		assert.Equal(t, []string{"c0", "c1", "c2"}[i/3], bar.Board, "in board order")
		if bar.Gate == "serving" {
			servingStart[bar.Board], _ = bar.span(t)
		}
	}
	assert.Equal(t, "failed", bars[7].State, "c2's lease")
	assert.True(t, bars[8].Chain, "each lane marks its own chain")
	// Each lane is placed by its board's start: c1 started 500ms after c0,
	// c2 500ms after c1.
	step := servingStart["c1"] - servingStart["c0"]
	assert.Greater(t, step, 10.0)
	assert.InDelta(t, step, servingStart["c2"]-servingStart["c1"], 0.2)
}

func TestTimelineHandlerTrace(t *testing.T) {
	b, _ := controllerBoard(t, gate.BoardConfig{Name: "c0"})
	rec := getTimeline(t, b, "/timeline?format=trace&gate=self-dial", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	events := checkTrace(t, rec.Body.Bytes())
	var chain []string
	onChainTrack := isChainTrack(events)
	for _, ev := range events {
		if ev["ph"] == "X" && onChainTrack(ev) {
			chain = append(chain, ev["name"].(string))
		}
	}
	assert.Equal(t, []string{"serving", "self-dial"}, chain, "the chain asked for")
}
