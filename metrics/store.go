package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

type storeCollector struct {
	descs
	s               leasestore.Reporter
	calls, inFlight *prometheus.Desc
}

// NewStoreCollector returns a collector of store's StoreReport, its series
// labelled store=name (families: docs/catalogue.md): the calls of the
// trackers on it, as each tracker's Report.Calls counts them. store must be
// a leasestore.Reporter (MemStore, leasetest.FaultStore, the etcdlease and
// k8slease stores; yours, with leasestore.Counters), else the collector
// reports the error.
func NewStoreCollector(name string, store leasestore.Store) prometheus.Collector {
	if err := checkName("store", name); err != nil {
		return invalid{err}
	}
	s, ok := store.(leasestore.Reporter)
	if !ok {
		return invalid{jujuerrors.NotValidf("store %T (must be a store that counts its calls, a leasestore.Reporter, such as *leasestore.MemStore)", store)}
	}
	c := &storeCollector{descs: newDescs("lease_store", "store", name), s: s}
	c.calls = c.add("calls_total",
		"Store calls finished, by operation (claim, extend, revoke) and outcome: ok, definitive (ErrHeld from claim, ErrNotHeld from extend and revoke), not-sent (ErrNotSent) or ambiguous (any other error: the store may have applied the call).",
		"operation", "outcome")
	c.inFlight = c.add("calls_in_flight",
		"Store calls begun and not yet returned, including calls the store holds back while it bounds its calls in flight.")
	return c
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.StoreReport()
	c.operation(ch, "claim", r.Claim)
	c.operation(ch, "extend", r.Extend)
	c.operation(ch, "revoke", r.Revoke)
	gauge(ch, c.inFlight, float64(r.InFlight))
}

func (c *storeCollector) operation(ch chan<- prometheus.Metric, op string, calls leasestore.Calls) {
	counter(ch, c.calls, calls.OK, op, "ok")
	counter(ch, c.calls, calls.Definitive, op, "definitive")
	counter(ch, c.calls, calls.NotSent, op, "not-sent")
	counter(ch, c.calls, calls.Ambiguous, op, "ambiguous")
}
