package k8slease

import (
	"log/slog"

	"github.com/juju/clock"
)

// Option adjusts a Store. A nil Option is ignored.
type Option func(*options)

type options struct {
	clock  clock.Clock
	logger *slog.Logger
}

// WithClock times the store on clk: the renewTime and acquireTime it
// writes (clk.Now, as wall time) and how long it has watched a Lease go
// unchanged before it takes it over (on clk's monotonic reading). Nil, the
// default, means clock.WallClock.
func WithClock(clk clock.Clock) Option {
	return func(o *options) { o.clock = clk }
}

// WithLogger makes the store log to logger; nil, the default, means no
// logs. It logs what it finds about a Lease (a takeover, a deletion, a
// re-creation, a term ended by another party's write), once each, never a
// line per call; every record carries the namespace and the lease.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}
