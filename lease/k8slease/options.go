package k8slease

import "github.com/juju/clock"

// Option adjusts a Store.
type Option func(*options)

type options struct {
	clock clock.Clock
}

// WithClock times the store on clk: the renewTime and acquireTime it
// writes (clk.Now, as wall time) and how long it has watched a Lease go
// unchanged before it takes it over (on clk's monotonic reading). Nil, the
// default, means clock.WallClock.
func WithClock(clk clock.Clock) Option {
	return func(o *options) { o.clock = clk }
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.clock == nil {
		o.clock = clock.WallClock
	}
	return o
}
