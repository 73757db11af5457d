// Package metrics exports coldstart's components to Prometheus: one
// prometheus.Collector per component instance, computing every value from
// the component's Report at scrape time.
//
// It answers the HA controller whose leadership flapped and could not say
// what happened: how often renewals were confirmed, ambiguous or refused,
// how long the lease sat Unknown, whether the dialer fell back to a peer,
// which gate startup was stuck on. A collector starts no goroutine and adds
// nothing to a component's hot path; a scrape costs what Report costs plus
// the metrics it sends.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(
//		metrics.NewBoardCollector("c0", board),
//		metrics.NewListenerCollector("c0", l),
//		metrics.NewDialerCollector("c0", d),
//		metrics.NewTrackerCollector(tracker),      // labelled lease="singular-controller"
//		// or, for many leases, metrics.NewTrackerSetCollector(func() []*lease.Tracker { ... }),
//		metrics.NewLeaderStatusCollector(tracker), // opt-in: client-go's leader_election_master_status
//		metrics.NewUpgradeCollector("c0", upgrades),
//		metrics.NewStoreCollector("leases", store), // a lease.Config.Store that counts its calls, e.g. a MemStore
//	)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Names follow coldstart_<package>_<what>_<unit>; each collector labels
// its series with the instance name it was given, as a constant label
// (board, listener, dialer, upgrade, store) or, for a tracker, its lease
// name (lease). Two collectors of one kind with the same name are refused by
// Register, as are an empty name and a nil component (errors matching
// errors.NotValid from github.com/juju/errors). Every family, with its
// type and labels, is in the repository's catalogue (docs/catalogue.md).
package metrics
