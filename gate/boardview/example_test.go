package boardview_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// A board answers a readiness probe the Kubernetes /readyz way; a state
// kept outside package gate (here a bare pair of channels) goes on it with
// Follow, and composites are built on the gate Follow returns.
func ExampleReadyHandler() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	defer board.Close()
	serving := gate.New("serving")
	board.Add("serving", serving)
	completed, failed := make(chan struct{}), make(chan struct{})
	upgraded := board.Follow("upgrade", gate.Channels(completed, failed))
	stable := gate.AllOf("stable", serving, upgraded)
	board.Add("stable", stable)

	// http.Handle("/readyz", boardview.ReadyHandler(board))
	probe := func() {
		rec := httptest.NewRecorder()
		boardview.ReadyHandler(board).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
		fmt.Print(rec.Code, "\n", rec.Body)
	}
	serving.Unlock()
	clk.Advance(12 * time.Second)
	probe()
	close(completed)
	_ = gate.Wait(context.Background(), stable)
	probe()
	// Output:
	// 503
	// [+]serving ok
	// [-]upgrade locked for 12s
	// [-]stable locked for 12s
	// readyz check failed
	// 200
	// [+]serving ok
	// [+]upgrade ok
	// [+]stable ok
	// readyz check passed
}

// migration is a component kept outside package gate (as an upgrade.Gate
// is): channels for its outcome, and what it says about itself.
type migration struct {
	done, failed chan struct{}
	cause        error
}

func (m *migration) Completed() <-chan struct{} { return m.done }
func (m *migration) Failed() <-chan struct{}    { return m.failed }
func (m *migration) Cause() error               { return m.cause }
func (m *migration) Detail() string             { return "migrating schema 41 to 42" }

// A component on the board speaks in its own words: its detail while the
// entry is locked, its cause once it failed. (An *upgrade.Gate is such a
// component: board.Follow("upgrade", g).)
func ExampleReadyHandler_component() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	m := &migration{done: make(chan struct{}), failed: make(chan struct{})}
	entry := board.Follow("schema", m)

	probe := func() {
		rec := httptest.NewRecorder()
		boardview.ReadyHandler(board).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		fmt.Print(rec.Body)
	}
	clk.Advance(3 * time.Second)
	probe()
	m.cause = errors.New("table agents: disk full")
	close(m.failed)
	<-entry.Done()
	probe()
	var failed *gate.FailedError
	fmt.Println(errors.As(entry.Err(), &failed), failed.Name, errors.Is(entry.Err(), gate.ErrFailed))
	// Output:
	// [-]schema locked for 3s (migrating schema 41 to 42)
	// readyz check failed
	// [-]schema failed: table agents: disk full
	// readyz check failed
	// true schema true
}

// TimelineHandler serves a board's timeline as text (here), JSON, SVG or
// trace events.
func ExampleTimelineHandler() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	port, lease := gate.New("controller-port"), gate.New("lease")
	board.Add("controller-port", port)
	board.Add("lease", lease)
	board.Add("stable", gate.AllOf("stable", port, lease))
	clk.Advance(time.Second)
	port.Unlock()
	clk.Advance(2 * time.Second)
	lease.Fail(errors.New("no quorum"))

	// http.Handle("/timeline", boardview.TimelineHandler(board))
	rec := httptest.NewRecorder()
	boardview.TimelineHandler(board).ServeHTTP(rec, httptest.NewRequest("GET", "/timeline", nil))
	fmt.Print(rec.Body)
	// Output:
	// The time when a gate opened or failed is printed after the "@" character.
	// The time it took after the input it waited for last is printed after the "+" character.
	//
	// stable failed @3s: gate "lease" failed: no quorum
	// └─lease failed @3s +3s: no quorum
}

// Two processes each serve their board's startup as a trace; merged, their
// boards are two processes on one wall-clock time axis (Perfetto and
// chrome://tracing open the merged file).
func ExampleMergeTraces() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var files []io.Reader
	for i, name := range []string{"c0", "c1"} {
		clk := testclock.NewClock(start.Add(time.Duration(i) * 300 * time.Millisecond)) // c1 started later
		board := gate.NewBoard(gate.BoardConfig{Name: name, Clock: clk})
		serving := gate.New("serving")
		board.Add("serving", serving)
		clk.Advance(time.Second)
		serving.Unlock()
		var trace bytes.Buffer // in real life: GET /timeline?format=trace of each process
		_ = boardview.WriteTrace(&trace, board.Timeline())
		files = append(files, &trace)
	}

	var merged bytes.Buffer
	_ = boardview.MergeTraces(&merged, files...)
	var file struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       float64
			Pid, Tid      int
			Args          struct{ Name string }
		}
	}
	_ = json.Unmarshal(merged.Bytes(), &file)
	process := map[int]string{}
	for _, ev := range file.TraceEvents {
		switch {
		case ev.Ph == "M" && ev.Name == "process_name":
			process[ev.Pid] = ev.Args.Name
		case ev.Ph == "X" && ev.Cat != "critical": // an entry's own track, not the chain's
			at := time.UnixMicro(int64(ev.Ts)).Sub(start)
			fmt.Printf("pid %d (%s): %s from +%v for %v\n", ev.Pid, process[ev.Pid], ev.Name, at, time.Duration(ev.Dur)*time.Microsecond)
		}
	}
	// Output:
	// pid 1 (c0): serving from +0s for 1s
	// pid 2 (c1): serving from +300ms for 1s
}
