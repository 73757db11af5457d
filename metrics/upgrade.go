package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/upgrade"
)

// upgradePhases are the values of coldstart_upgrade_phase's phase label.
var upgradePhases = [...]upgrade.Phase{upgrade.PhaseChecking, upgrade.PhaseRunningSteps, upgrade.PhaseComplete, upgrade.PhaseFailed, upgrade.PhaseDraining}

type upgradeCollector struct {
	descs
	g                                  *upgrade.Gate
	phase, attempts, lastFailed, calls *prometheus.Desc
}

// NewUpgradeCollector returns a collector of g's Report, its series
// labelled upgrade=name (families: docs/catalogue.md).
func NewUpgradeCollector(name string, g *upgrade.Gate) prometheus.Collector {
	if err := checkName("upgrade", name); err != nil {
		return invalid{err}
	}
	if g == nil {
		return invalid{jujuerrors.NotValidf("nil *upgrade.Gate (must be one from upgrade.NewGate)")}
	}
	c := &upgradeCollector{descs: newDescs("upgrade", "upgrade", name), g: g}
	c.phase = c.add("phase",
		"Whether the upgrade gate is in the phase the phase label names (checking, running-steps, complete, failed or draining): 1 for its phase, 0 for the others.",
		"phase")
	c.attempts = c.add("attempts_total",
		"Upgrade attempts begun: 1 for the gate's first, one more each time Enter leaves complete or failed.")
	c.lastFailed = c.add("last_failed",
		"1 if an attempt has failed and left its cause (kept across attempts, so it says why the previous one failed), else 0.")
	c.calls = c.add("calls_total",
		"Calls the gate decided while it refused calls (Middleware, grpcupgrade's interceptors, Admit), by phase and outcome: admitted (allowlisted) or refused (not executed). Calls served while complete are not counted.",
		"phase", "outcome")
	return c
}

func (c *upgradeCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.g.Report()
	for _, p := range upgradePhases {
		gauge(ch, c.phase, flag(r.Phase == p), p.String())
	}
	counter(ch, c.attempts, r.Epoch)
	gauge(ch, c.lastFailed, flag(r.LastErr != nil))
	for _, calls := range r.Calls {
		phase := calls.Phase.String()
		counter(ch, c.calls, calls.Admitted, phase, "admitted")
		counter(ch, c.calls, calls.Refused, phase, "refused")
	}
}
