package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// namespace is the first part of every metric name but client-go's.
const namespace = "coldstart"

// descs builds, keeps and describes a collector's Descs, all with its
// constant label (none for a tracker set).
type descs struct {
	subsystem string
	labels    prometheus.Labels
	all       []*prometheus.Desc
}

func newDescs(subsystem, label, value string) descs {
	return descs{subsystem: subsystem, labels: prometheus.Labels{label: value}}
}

// add returns the Desc of coldstart_<subsystem>_<name>.
func (d *descs) add(name, help string, variableLabels ...string) *prometheus.Desc {
	desc := prometheus.NewDesc(prometheus.BuildFQName(namespace, d.subsystem, name), help, variableLabels, d.labels)
	d.all = append(d.all, desc)
	return desc
}

func (d *descs) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range d.all {
		ch <- desc
	}
}

// send sends one sample, or an invalid metric (the scrape reports the error)
// if the exposition cannot carry a label value.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labelValues ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labelValues...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labelValues ...string) {
	send(ch, d, prometheus.GaugeValue, v, labelValues...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labelValues ...string) {
	send(ch, d, prometheus.CounterValue, float64(v), labelValues...)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// checkName refuses an empty instance name of component kind.
func checkName(kind, name string) error {
	if name == "" {
		return jujuerrors.NotValidf(`%s name "" (must be non-empty: it labels every series)`, kind)
	}
	return nil
}

// invalid is the collector for bad arguments: Register fails with err, as
// does every scrape of one registered unchecked, rather than a panic.
type invalid struct{ err error }

func (c invalid) Describe(ch chan<- *prometheus.Desc) { ch <- prometheus.NewInvalidDesc(c.err) }

func (c invalid) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(c.err), c.err)
}
