package metrics_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/metrics"
	"github.com/coldstart-go/coldstart/upgrade"
)

// A controller registers a collector per component on its own registry
// and serves it beside /readyz; each scrape reads the Reports then.
func Example() {
	board := gate.NewBoard(gate.BoardConfig{Name: "c0"})
	defer board.Close()
	upgrades := upgrade.NewGate(upgrade.GateConfig{})
	port := gate.New("controller-port")
	board.Add("controller-port", port)
	port.Unlock()
	upgraded := board.Follow("upgrade", upgrades)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewBoardCollector("c0", board),
		metrics.NewUpgradeCollector("c0", upgrades),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/readyz", boardview.ReadyHandler(board))

	show := func() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for line := range strings.Lines(rec.Body.String()) {
			if strings.HasPrefix(line, "coldstart_gate_state{") && strings.HasSuffix(line, " 1\n") ||
				strings.HasPrefix(line, "coldstart_upgrade_phase{") && strings.HasSuffix(line, " 1\n") {
				fmt.Print(line)
			}
		}
	}
	show()
	upgrades.Complete()
	<-upgraded.Unlocked() // the board follows the gate on a goroutine of its own
	fmt.Println("-- upgrade complete --")
	show()
	// Output:
	// coldstart_gate_state{board="c0",gate="controller-port",state="unlocked"} 1
	// coldstart_gate_state{board="c0",gate="upgrade",state="locked"} 1
	// coldstart_upgrade_phase{phase="checking",upgrade="c0"} 1
	// -- upgrade complete --
	// coldstart_gate_state{board="c0",gate="controller-port",state="unlocked"} 1
	// coldstart_gate_state{board="c0",gate="upgrade",state="unlocked"} 1
	// coldstart_upgrade_phase{phase="complete",upgrade="c0"} 1
}

// Bad arguments surface where Prometheus reports every collector error:
// at Register.
func ExampleNewBoardCollector_badName() {
	err := prometheus.NewRegistry().Register(metrics.NewBoardCollector("", gate.NewBoard(gate.BoardConfig{})))
	fmt.Println(errors.Is(err, jujuerrors.NotValid))
	fmt.Println(errors.Unwrap(err))
	// Output:
	// true
	// board name "" (must be non-empty: it labels every series) not valid
}
