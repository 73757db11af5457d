package gate_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/gate"
)

// A board remembers what startup waited on: each entry's critical chain
// says which input it waited for last, and how long each link took.
func ExampleTimeline_CriticalChain() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	serving, lease := board.New("serving"), board.New("lease")
	upgrade := board.New("upgrade").After(serving) // the steps run once it serves
	stable := gate.AllOf("stable", serving, upgrade, lease)
	board.Add(stable)
	api := board.New("api-port").After(stable) // our code opens it once stable

	clk.Advance(800 * time.Millisecond)
	serving.Unlock()
	clk.Advance(700 * time.Millisecond)
	lease.Unlock()
	clk.Advance(500 * time.Millisecond)
	upgrade.Unlock() // the last of stable's parts: stable opens with it
	clk.Advance(100 * time.Millisecond)
	api.Unlock()

	fmt.Print(board.Timeline().CriticalChain("")) // what startup waited on longest
	// Output:
	// api-port @2.1s +100ms
	// └─stable @2s
	//   └─upgrade @2s +1.2s
	//     └─serving @800ms +800ms
}

// TimelineHandler serves the same as text (here), JSON or SVG.
func ExampleBoard_TimelineHandler() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	port, lease := board.New("controller-port"), board.New("lease")
	board.Add(gate.AllOf("stable", port, lease))
	clk.Advance(time.Second)
	port.Unlock()
	clk.Advance(2 * time.Second)
	lease.Fail(errors.New("no quorum"))

	// http.Handle("/timeline", board.TimelineHandler())
	rec := httptest.NewRecorder()
	board.TimelineHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/timeline", nil))
	fmt.Print(rec.Body)
	// Output:
	// The time when a gate opened or failed is printed after the "@" character.
	// The time it took after the input it waited for last is printed after the "+" character.
	//
	// stable failed @3s: gate "lease" failed: no quorum
	// └─lease failed @3s +3s: no quorum
}

// A board with a Logger writes one record as each gate opens or fails.
func ExampleBoardConfig() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output
			}
			return a
		},
	}))
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk, Logger: logger})
	port, lease := board.New("controller-port"), board.New("lease")

	clk.Advance(1500 * time.Millisecond)
	port.Unlock()
	clk.Advance(time.Second)
	lease.Fail(errors.New("no quorum"))
	// Output:
	// level=INFO msg="gate opened" gate=controller-port waited=1.5s
	// level=WARN msg="gate failed" gate=lease waited=2.5s err="no quorum"
}
