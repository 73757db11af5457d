// Package metrics exports coldstart's components to Prometheus: one
// prometheus.Collector per component instance, computing every value from
// the component's Report at scrape time.
//
// A collector starts no goroutine and adds nothing to a component's hot
// path; a scrape costs what Report costs plus the metrics it sends
// (DESIGN.md tells what the package is for).
//
// The package Example and README.md register every collector.
//
// Each collector labels its series with its instance name (a tracker's,
// its lease name) as a constant label. Register refuses two collectors of
// one kind with one name, an empty name and a nil component (errors matching
// errors.NotValid from github.com/juju/errors). Every family, its type and
// labels are in docs/catalogue.md.
package metrics
