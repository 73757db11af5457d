package metrics

import (
	"slices"

	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// gateStates are the values of coldstart_gate_state's state label.
var gateStates = [...]gate.State{gate.StateLocked, gate.StateUnlocked, gate.StateFailed}

type boardCollector struct {
	descs
	b           *gate.Board
	state, wait *prometheus.Desc
}

// NewBoardCollector returns a collector of b's Report, its series labelled
// board=name (families: docs/catalogue.md). A gate's name is exported as
// package boardview shows it (made printable, cut at 256 bytes); names that
// are then the same are exported once, for the first of their entries.
func NewBoardCollector(name string, b *gate.Board) prometheus.Collector {
	if err := checkName("board", name); err != nil {
		return invalid{err}
	}
	if b == nil {
		return invalid{jujuerrors.NotValidf("nil *gate.Board (must be one from gate.NewBoard)")}
	}
	c := &boardCollector{descs: newDescs("gate", "board", name), b: b}
	c.state = c.add("state",
		"Whether each gate on the board is in the state the state label names (locked, unlocked or failed): 1 for its state, 0 for the others.",
		"gate", "state")
	c.wait = c.add("wait_seconds",
		"How long each gate has been locked, or how long it took to open or fail, since it was put on the board.",
		"gate")
	return c
}

func (c *boardCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.b.Report()
	names := make([]string, 0, len(r))
	for _, e := range r {
		name := printable.Name(e.Name)
		// Boards hold tens of gates: a scan costs less than a map.
		if slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
		for _, s := range gateStates {
			gauge(ch, c.state, flag(e.State == s), name, s.String())
		}
		gauge(ch, c.wait, e.For.Seconds(), name)
	}
}
