package etcdlease

import (
	"log/slog"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
)

// Option adjusts a Store or a SessionStore. A nil Option is ignored.
type Option func(*options)

type options struct {
	clock         clock.Clock
	logger        *slog.Logger
	maxInFlight   int
	revokeOnClose bool
}

// DefaultMaxInFlight is how many etcd calls a store has in flight at most
// unless WithMaxInFlight says otherwise.
const DefaultMaxInFlight = 64

// WithClock times the store's own waits (its watch retries; a
// SessionStore's keep-alives, grants and expiries) and dates its etcd
// leases' confirmed renewals on clk. Nil, the default, means
// clock.WallClock. etcd's TTLs always run on etcd's clock; give the store
// the tracker's clock.
func WithClock(clk clock.Clock) Option {
	return func(o *options) { o.clock = clk }
}

// WithLogger makes the store log to logger; nil, the default, means no
// logs. It logs transitions, never a line per call and no counts (those
// are in StoreReport): a SessionStore's session granted, re-created,
// lost, retired, unconfirmed (an outage begins) and confirmed again
// (docs/catalogue.md lists the records). Nothing is logged once Close has
// returned.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithMaxInFlight bounds the etcd calls the store makes at once (claims,
// renewals, revokes and reads alike) to n; zero means DefaultMaxInFlight,
// and a negative n makes NewStore and NewSessionStore return an error
// matching errors.NotValid. A call waits for a free slot, newest first
// (DESIGN.md, "Call slots: renewals first, then the newest call"); one
// whose ctx ends while it waits sends nothing and returns an error matching
// leasestore.ErrNotSent.
func WithMaxInFlight(n int) Option {
	return func(o *options) { o.maxInFlight = n }
}

// WithRevokeOnClose makes a SessionStore's Close revoke its etcd lease, so
// that every key it holds is deleted at once rather than when the TTL runs
// out. Revoking ends every term of the store before its grant runs out:
// close the store only after every tracker on it is closed. It applies to
// a SessionStore only: NewStore rejects it (a Store has nothing to close).
func WithRevokeOnClose() Option {
	return func(o *options) { o.revokeOnClose = true }
}

// newOptions applies opts; session says whether they are a SessionStore's
// (a Store rejects the options that apply to a session only).
func newOptions(opts []Option, session bool) (options, error) {
	var o options
	for _, opt := range opts {
		if opt != nil { // a nil Option is ignored, as everywhere in coldstart
			opt(&o)
		}
	}
	if o.revokeOnClose && !session {
		return o, jujuerrors.NotValidf("option WithRevokeOnClose (must be given to NewSessionStore only: a Store has no session to revoke)")
	}
	if o.clock == nil {
		o.clock = clock.WallClock
	}
	switch {
	case o.maxInFlight < 0:
		return o, jujuerrors.NotValidf("MaxInFlight %d (must be positive, or 0 for the default)", o.maxInFlight)
	case o.maxInFlight == 0:
		o.maxInFlight = DefaultMaxInFlight
	}
	return o, nil
}
