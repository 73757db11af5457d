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
	trackers func() []*lease.Tracker
	// set: the lease is a variable label rather than a constant one.
	set bool

	state, token, until, closed  *prometheus.Desc
	losses, denials, transitions *prometheus.Desc
	unknown, lastCall, inCall    *prometheus.Desc
	handOverGap, late            *prometheus.Desc
}

// NewTrackerCollector returns a collector of t's Report, its series
// labelled lease=<the lease's name> (families: docs/catalogue.md). Times are
// on the tracker's clock (the until timestamp is Unix time only on the wall
// clock); the token is exact up to 2^53. Store calls are NewStoreCollector's.
func NewTrackerCollector(t *lease.Tracker) prometheus.Collector {
	if t == nil {
		return invalid{jujuerrors.NotValidf("nil *lease.Tracker (must be one from lease.NewTracker)")}
	}
	one := []*lease.Tracker{t}
	return newTrackerCollector(newDescs("lease", "lease", t.Report().Name), func() []*lease.Tracker { return one }, false)
}

// NewTrackerSetCollector is NewTrackerCollector for many leases (and
// cheaper for hundreds, see README.md): the same series for the trackers
// that trackers returns at each scrape, which overlapping scrapes may call.
// Nil entries are skipped; of two trackers of one lease only the first is
// exported. A registry takes it or NewTrackerCollectors, not both.
func NewTrackerSetCollector(trackers func() []*lease.Tracker) prometheus.Collector {
	if trackers == nil {
		return invalid{jujuerrors.NotValidf("nil trackers func (must be a func returning the trackers to export)")}
	}
	return newTrackerCollector(descs{subsystem: "lease"}, trackers, true)
}

func newTrackerCollector(d descs, trackers func() []*lease.Tracker, set bool) *trackerCollector {
	c := &trackerCollector{descs: d, trackers: trackers, set: set}
	var perLease []string
	if set {
		perLease = []string{"lease"}
	}
	add := func(name, help string, variableLabels ...string) *prometheus.Desc {
		return c.add(name, help, append(perLease, variableLabels...)...)
	}
	c.state = add("state",
		"Whether the tracker's lease is in the state the state label names (unknown, held or not-held): 1 for its state, 0 for the others.",
		"state")
	c.token = add("token",
		"The fencing token of the term last confirmed by the store.")
	c.until = add("until_timestamp_seconds",
		"While the lease is held, when the promise ends (on the tracker's clock, Unix time on the wall clock); 0 while it is not held.")
	c.closed = add("closed",
		"1 once the tracker has been closed, else 0.")
	c.losses = add("losses_total",
		"Terms this tracker held that the store said are over (definitive losses).")
	c.denials = add("denials_total",
		"Claims the store denied because another holder had the lease.")
	c.transitions = add("transitions_total",
		"Changes of the tracker's state.")
	c.unknown = add("unknown_seconds_total",
		"Time the tracker spent in state unknown, the current stretch included.")
	c.lastCall = add("last_call_seconds",
		"How long the last finished store call took.")
	c.inCall = add("call_in_flight_seconds",
		"How long the store call now in flight has run; 0 when none is.")
	c.handOverGap = add("handover_gap_seconds",
		"Leaderless gaps of the hand-overs to this tracker: from the end of another holder's term as it learnt it (the release or expiry its store's watch reported, else its last refused claim) to its own Held.")
	c.late = add("late_renewals_total",
		"Renewals whose timer fired more than Margin/4 late, by the first cause the process saw (suspend, clock-step, throttled, gc-pause, scheduler, or unexplained); a late renewal demotes nothing.",
		"cause")
	return c
}

func (c *trackerCollector) Collect(ch chan<- prometheus.Metric) {
	ts := c.trackers()
	seen := make(map[string]bool, len(ts)) // in a set, the leases exported
	// lv: the lease's name in a set, else none; spare room for the state.
	lv := make([]string, 0, 2)
	for _, t := range ts {
		if t == nil {
			continue
		}
		r := t.Report()
		if c.set {
			if seen[r.Name] {
				continue
			}
			seen[r.Name] = true
			lv = append(lv[:0], r.Name)
		}
		c.collect(ch, r, lv)
	}
}

func (c *trackerCollector) collect(ch chan<- prometheus.Metric, r lease.Report, lv []string) {
	for _, s := range leaseStates {
		gauge(ch, c.state, flag(r.State == s), append(lv, s.String())...)
	}
	gauge(ch, c.token, float64(r.Token), lv...)
	var until float64
	if r.State == lease.Held {
		until = float64(r.Until.UnixNano()) / 1e9
	}
	gauge(ch, c.until, until, lv...)
	gauge(ch, c.closed, flag(r.Closed), lv...)
	counter(ch, c.losses, r.Losses, lv...)
	counter(ch, c.denials, r.Denials, lv...)
	counter(ch, c.transitions, r.Transitions, lv...)
	send(ch, c.unknown, prometheus.CounterValue, r.UnknownFor.Seconds(), lv...)
	gauge(ch, c.lastCall, r.LastCall.Seconds(), lv...)
	gauge(ch, c.inCall, r.InCall.Seconds(), lv...)
	m, err := prometheus.NewConstSummary(c.handOverGap, r.HandOvers, r.HandOverGaps.Seconds(), nil, lv...)
	if err != nil {
		m = prometheus.NewInvalidMetric(c.handOverGap, err)
	}
	ch <- m
	explained := r.LateSuspend + r.LateClockStep + r.LateThrottled + r.LateGCPause + r.LateScheduler
	for _, l := range [...]struct {
		cause string
		n     uint64
	}{
		{"suspend", r.LateSuspend}, {"clock-step", r.LateClockStep}, {"throttled", r.LateThrottled},
		{"gc-pause", r.LateGCPause}, {"scheduler", r.LateScheduler}, {"unexplained", r.LateRenewals - explained},
	} {
		counter(ch, c.late, l.n, append(lv, l.cause)...)
	}
}

// leaderStatusHelp is client-go's HELP, word for word, so this gauge can sit
// beside client-go's in one registry (which refuses two HELPs for a name).
const leaderStatusHelp = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name."

type leaderStatusCollector struct {
	t    *lease.Tracker
	desc *prometheus.Desc
}

// NewLeaderStatusCollector returns, for dashboards written for client-go's
// leader election, a collector of leader_election_master_status{name="<lease>"}:
// 1 while t holds its lease (State Held), else 0, exactly as client-go's.
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

func (c *leaderStatusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *leaderStatusCollector) Collect(ch chan<- prometheus.Metric) {
	s, _ := c.t.Current()
	gauge(ch, c.desc, flag(s.State == lease.Held))
}
