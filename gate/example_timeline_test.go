package gate_test

import (
	"errors"
	"fmt"
	"log/slog"
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
	serving, lease := gate.New("serving"), gate.New("lease")
	upgrade := gate.New("upgrade").After(serving) // the steps run once it serves
	stable := gate.AllOf("stable", serving, upgrade, lease)
	api := gate.New("api-port").After(stable) // our code opens it once stable
	for _, l := range []*gate.Lock{serving, lease, upgrade, stable, api} {
		board.Add(l.Name(), l)
	}

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
	port, lease := gate.New("controller-port"), gate.New("lease")
	board.Add("controller-port", port)
	board.Add("lease", lease)

	clk.Advance(1500 * time.Millisecond)
	port.Unlock()
	clk.Advance(time.Second)
	lease.Fail(errors.New("no quorum"))
	// Output:
	// level=INFO msg="gate opened" gate=controller-port waited=1.5s
	// level=WARN msg="gate failed" gate=lease waited=2.5s err="no quorum"
}
