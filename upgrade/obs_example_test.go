package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/upgrade"
)

// A gate with a logger makes one record per phase change, and nothing
// else: the calls it decides are counted in Report (3,000 refusals, no
// line), and the metrics module exports the counts.
func ExampleGateConfig() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	clk := testclock.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk, Logger: logger})
	isStatus := func(r *http.Request) bool { return r.URL.Path == "/status" }
	h := upgrade.Middleware(g, isStatus)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 3000 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/deploy", nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/status", nil))
	clk.Advance(4 * time.Second)
	_ = g.Enter(upgrade.PhaseRunningSteps)
	clk.Advance(5 * time.Second)
	g.Fail(errors.New("upgrade steps: disk full"))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/deploy", nil))

	for _, c := range g.Report().Calls {
		fmt.Printf("%s: refused %d, admitted %d\n", c.Phase, c.Refused, c.Admitted)
	}
	// Output:
	// level=INFO msg="upgrade phase changed" phase=running-steps from=checking lasted=4s epoch=1
	// level=ERROR msg="upgrade phase changed" phase=failed from=running-steps lasted=5s epoch=1 err="upgrade steps: disk full"
	// checking: refused 3000, admitted 1
	// running-steps: refused 0, admitted 0
	// failed: refused 1, admitted 0
	// draining: refused 0, admitted 0
}

// OnTransition is a hook for the same phase changes, run inside the call
// that made each one: here, the story of a failed attempt and a retried
// one.
func ExampleGateConfig_onTransition() {
	g := upgrade.NewGate(upgrade.GateConfig{OnTransition: func(from, to upgrade.Phase, err error) {
		if err != nil {
			fmt.Printf("%s -> %s: %v\n", from, to, err)
			return
		}
		fmt.Printf("%s -> %s\n", from, to)
	}})
	_ = g.RunSteps(context.Background(), func(context.Context) error { return errors.New("disk full") })
	_ = g.RunSteps(context.Background(), func(context.Context) error { return nil })
	// Output:
	// checking -> running-steps
	// running-steps -> failed: upgrade steps: disk full
	// failed -> running-steps
	// running-steps -> complete
}
