package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/dialer"
)

type dialerCollector struct {
	descs
	d                                 *dialer.Dialer
	dials, fallbacks, failures, ready *prometheus.Desc
}

// NewDialerCollector returns a collector of d's Report, its series
// labelled dialer=name (families: docs/catalogue.md).
func NewDialerCollector(name string, d *dialer.Dialer) prometheus.Collector {
	if err := checkName("dialer", name); err != nil {
		return invalid{err}
	}
	if d == nil {
		return invalid{jujuerrors.NotValidf("nil *dialer.Dialer (must be one from dialer.New)")}
	}
	c := &dialerCollector{descs: newDescs("dialer", "dialer", name), d: d}
	c.dials = c.add("dials_total",
		"Dial and Connect calls that connected, by route: local (this machine's controller) or peer.", "route")
	c.fallbacks = c.add("fallbacks_total",
		"Calls that dialled a peer although this machine has a controller: it was not ready within LocalReadyGrace, or did not answer.")
	c.failures = c.add("failures_total",
		"Calls that returned a DialError: their context ended before any address answered.")
	c.ready = c.add("local_ready",
		"1 once this machine's controller is ready (Config.LocalReady closed), else 0.")
	return c
}

func (c *dialerCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.d.Report()
	counter(ch, c.dials, r.LocalDials, "local")
	counter(ch, c.dials, r.PeerDials, "peer")
	counter(ch, c.fallbacks, r.Fallbacks)
	counter(ch, c.failures, r.Failures)
	gauge(ch, c.ready, flag(r.LocalReady))
}
