package etcdlease

import (
	"fmt"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/lease"
)

// Option adjusts a Store or a SessionStore.
type Option func(*options)

type options struct {
	clock         clock.Clock
	maxInFlight   int
	revokeOnClose bool
}

// DefaultMaxInFlight is how many etcd calls a store has in flight at most
// unless WithMaxInFlight says otherwise.
const DefaultMaxInFlight = 64

// WithClock times the store's own waits (its watch retries; a
// SessionStore's keep-alives, grants and expiries) on clk. Nil, the
// default, means clock.WallClock. etcd's TTLs always run on etcd's clock.
func WithClock(clk clock.Clock) Option {
	return func(o *options) { o.clock = clk }
}

// WithMaxInFlight bounds the etcd calls the store makes at once (claims,
// renewals, revokes and reads alike) to n; zero or less means
// DefaultMaxInFlight. A call waits for a free slot, newest first (a waiter
// that has waited longest is the closest to its deadline, so serving the
// newest gets more calls done in time when thousands start together); one
// whose ctx ends while it waits sends nothing and returns an error matching
// lease.ErrNotSent.
func WithMaxInFlight(n int) Option {
	return func(o *options) { o.maxInFlight = n }
}

// WithRevokeOnClose makes a SessionStore's Close revoke its etcd lease, so
// that every key it holds is deleted at once rather than when the TTL runs
// out. Revoking ends every term of the store before its grant runs out:
// close the store only after every tracker on it is closed. A Store
// ignores it.
func WithRevokeOnClose() Option {
	return func(o *options) { o.revokeOnClose = true }
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = clock.WallClock
	}
	if o.maxInFlight <= 0 {
		o.maxInFlight = DefaultMaxInFlight
	}
	return o
}

// notSent is the error of a call not sent to etcd at all: its ctx ended
// before one of the store's call slots was free (see WithMaxInFlight), or
// before its batch of claims was sent. It is certain that etcd did not
// apply it, so it matches lease.ErrNotSent (the tracker keeps what it knew);
// as an *OpError it also matches ErrUnconfirmed, and it unwraps to the
// ctx's error.
func notSent(op, name, holder string, token uint64, err error) error {
	return &OpError{Op: op, Name: name, Holder: holder, Token: token,
		Err: fmt.Errorf("%w: %w", lease.ErrNotSent, err)}
}
