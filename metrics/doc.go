// Package metrics exports coldstart's components to Prometheus: one
// prometheus.Collector per component instance, computing every value from
// the component's Report at scrape time.
//
// A collector starts no goroutine and adds nothing to a component's hot
// path; a scrape costs what Report costs plus the metrics it sends
// (DESIGN.md tells what the package is for).
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
// Each collector labels its series with its instance name (a tracker's,
// its lease name) as a constant label. Register refuses two collectors of
// one kind with one name, an empty name and a nil component (errors matching
// errors.NotValid from github.com/juju/errors). Every family, its type and
// labels are in docs/catalogue.md.
package metrics
