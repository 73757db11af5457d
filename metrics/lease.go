package metrics

import (
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coldstart-go/coldstart/lease"
)

// leaseStates are the values of coldstart_lease_state's state label.
var leaseStates = [...]lease.State{lease.Unknown, lease.Held, lease.NotHeld}

type trackerCollector struct {
	descs
	t *lease.Tracker

	state, token, until, closed                                      *prometheus.Desc
	calls, claims, renewals, ambiguous, notSent, losses, transitions *prometheus.Desc
	unknown, lastCall, inCall                                        *prometheus.Desc
}

// NewTrackerCollector returns a collector of t's Report, its series
// labelled lease=<the lease's name> (lease.Config.Name):
//
//	coldstart_lease_state{state}                 1 for the tracker's state (unknown, held, not-held), 0 for the others
//	coldstart_lease_token                        the fencing token of the term last confirmed
//	coldstart_lease_until_timestamp_seconds      the end of the promise while held, else 0
//	coldstart_lease_closed
//	coldstart_lease_calls_total                  store calls finished, whatever their answer
//	coldstart_lease_claims_total, coldstart_lease_renewals_total
//	coldstart_lease_ambiguous_calls_total, coldstart_lease_not_sent_calls_total
//	coldstart_lease_losses_total, coldstart_lease_transitions_total
//	coldstart_lease_unknown_seconds_total        time spent Unknown
//	coldstart_lease_last_call_seconds            latency of the last finished store call
//	coldstart_lease_call_in_flight_seconds       how long the call in flight has run, 0 if none
//
// Times are on the tracker's clock: the until timestamp is Unix time only
// on the wall clock. The token is exact up to 2^53.
func NewTrackerCollector(t *lease.Tracker) prometheus.Collector {
	if t == nil {
		return invalid{jujuerrors.NotValidf("nil *lease.Tracker (must be one from lease.NewTracker)")}
	}
	c := &trackerCollector{descs: newDescs("lease", "lease", t.Report().Name), t: t}
	c.state = c.add("state",
		"Whether the tracker's lease is in the state the state label names (unknown, held or not-held): 1 for its state, 0 for the others.",
		"state")
	c.token = c.add("token",
		"The fencing token of the term last confirmed by the store.")
	c.until = c.add("until_timestamp_seconds",
		"While the lease is held, when the promise ends (on the tracker's clock, Unix time on the wall clock); 0 while it is not held.")
	c.closed = c.add("closed",
		"1 once the tracker has been closed, else 0.")
	c.calls = c.add("calls_total",
		"Store calls (claims, extends, revokes) that finished, whatever their answer.")
	c.claims = c.add("claims_total",
		"Terms this tracker's claims were granted.")
	c.renewals = c.add("renewals_total",
		"Extends the store confirmed.")
	c.ambiguous = c.add("ambiguous_calls_total",
		"Store calls whose outcome is unknown: a timeout, a lost connection, a store without quorum.")
	c.notSent = c.add("not_sent_calls_total",
		"Store calls the store never sent (ErrNotSent).")
	c.losses = c.add("losses_total",
		"Definitive answers that the lease is not ours: a claim denied or a term over.")
	c.transitions = c.add("transitions_total",
		"Changes of the tracker's state.")
	c.unknown = c.add("unknown_seconds_total",
		"Time the tracker spent in state unknown, the current stretch included.")
	c.lastCall = c.add("last_call_seconds",
		"How long the last finished store call took.")
	c.inCall = c.add("call_in_flight_seconds",
		"How long the store call now in flight has run; 0 when none is.")
	return c
}

// Collect implements prometheus.Collector.
func (c *trackerCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.t.Report()
	for _, s := range leaseStates {
		gauge(ch, c.state, flag(r.State == s), s.String())
	}
	gauge(ch, c.token, float64(r.Token))
	var until float64
	if r.State == lease.Held {
		until = float64(r.Until.UnixNano()) / 1e9
	}
	gauge(ch, c.until, until)
	gauge(ch, c.closed, flag(r.Closed))
	counter(ch, c.calls, r.Calls)
	counter(ch, c.claims, r.Claims)
	counter(ch, c.renewals, r.Renewals)
	counter(ch, c.ambiguous, r.Ambiguous)
	counter(ch, c.notSent, r.NotSent)
	counter(ch, c.losses, r.Losses)
	counter(ch, c.transitions, r.Transitions)
	send(ch, c.unknown, prometheus.CounterValue, r.UnknownFor.Seconds())
	gauge(ch, c.lastCall, r.LastCall.Seconds())
	gauge(ch, c.inCall, r.InCall.Seconds())
}

// leaderStatusHelp is client-go's HELP for leader_election_master_status,
// word for word: a registry refuses one name with two HELP strings, so
// this gauge can sit beside client-go's (or controller-runtime's).
const leaderStatusHelp = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name."

type leaderStatusCollector struct {
	t    *lease.Tracker
	desc *prometheus.Desc
}

// NewLeaderStatusCollector returns, for dashboards and alerts written for
// client-go's leader election, a collector of the one series
//
//	leader_election_master_status{name="<lease>"}
//
// 1 while t holds its lease (State Held), else 0. It is opt-in, and
// outside the coldstart_ names, so that it means exactly what client-go's
// does; coldstart_lease_state says more.
func NewLeaderStatusCollector(t *lease.Tracker) prometheus.Collector {
	if t == nil {
		return invalid{jujuerrors.NotValidf("nil *lease.Tracker (must be one from lease.NewTracker)")}
	}
	return &leaderStatusCollector{
		t: t,
		desc: prometheus.NewDesc("leader_election_master_status", leaderStatusHelp,
			nil, prometheus.Labels{"name": t.Report().Name}),
	}
}

// Describe implements prometheus.Collector.
func (c *leaderStatusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *leaderStatusCollector) Collect(ch chan<- prometheus.Metric) {
	s, _ := c.t.Current()
	gauge(ch, c.desc, flag(s.State == lease.Held))
}
