package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/listener"
)

type listenerCollector struct {
	descs
	l *listener.Listener
	// per port, then the listener's
	accepted, rateLimited, refused, throttled, tempErrs, conns, bound, open, openFailed *prometheus.Desc
	closed, failed                                                                      *prometheus.Desc
}

// NewListenerCollector returns a collector of l's Report, its series
// labelled listener=name and, per port, port="controller" or "api"
// (families: docs/catalogue.md).
func NewListenerCollector(name string, l *listener.Listener) prometheus.Collector {
	if err := checkName("listener", name); err != nil {
		return invalid{err}
	}
	if l == nil {
		return invalid{jujuerrors.NotValidf("nil *listener.Listener (must be one from listener.New)")}
	}
	c := &listenerCollector{descs: newDescs("listener", "listener", name), l: l}
	c.accepted = c.add("accepted_connections_total",
		"Connections accepted from the kernel on the port, including one held while the rate limit delays its hand-off.", "port")
	c.rateLimited = c.add("rate_limited_connections_total",
		"Accepted connections whose hand-off the API port's rate limit delayed.", "port")
	c.refused = c.add("refused_connections_total",
		"Accepted connections closed unserved because the port closed under them (CloseAPI or Close).", "port")
	c.throttled = c.add("throttled_seconds_total",
		"Time the port's accept loop waited for the rate limit or the connection cap.", "port")
	c.tempErrs = c.add("temporary_errors_total",
		"Accept errors on the port that were retried.", "port")
	c.conns = c.add("connections",
		"Connections handed to Accept, or ready to be, and not yet closed.", "port")
	c.bound = c.add("bound",
		"1 while the port is bound to its address, else 0.", "port")
	c.open = c.add("open",
		"1 while the port's accept loop runs, else 0.", "port")
	c.openFailed = c.add("open_failed",
		"1 if the API port failed to open (Cause), else 0; always 0 for the controller port.", "port")
	c.closed = c.add("closed",
		"1 once the listener has been closed, else 0.")
	c.failed = c.add("failed",
		"1 if a permanent accept failure killed the listener, else 0.")
	return c
}

func (c *listenerCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.l.Report()
	c.port(ch, listener.Controller, r.Controller)
	c.port(ch, listener.API, r.API)
	gauge(ch, c.closed, flag(r.Closed))
	gauge(ch, c.failed, flag(r.Err != nil))
}

func (c *listenerCollector) port(ch chan<- prometheus.Metric, p listener.Port, r listener.PortReport) {
	port := p.String()
	counter(ch, c.accepted, r.Accepted, port)
	counter(ch, c.rateLimited, r.RateLimited, port)
	counter(ch, c.refused, r.Refused, port)
	send(ch, c.throttled, prometheus.CounterValue, r.Throttled.Seconds(), port)
	counter(ch, c.tempErrs, r.TemporaryErrors, port)
	gauge(ch, c.conns, float64(r.Conns), port)
	gauge(ch, c.bound, flag(r.Addr != nil), port)
	gauge(ch, c.open, flag(r.Open), port)
	gauge(ch, c.openFailed, flag(r.OpenErr != nil), port)
}
