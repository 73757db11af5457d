package lease

import (
	"math"
	"time"

	"github.com/juju/clock"
	"github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// Config configures a Tracker. Store, Name, Holder and Duration are
// required; every other zero value has the default its comment gives.
type Config struct {
	// Store is where the lease is claimed and extended.
	Store Store
	// Name is the lease, e.g. "singular-controller".
	Name string
	// Holder names this party; it is what other trackers' ErrNotLeader
	// reports. Two processes may use the same name: each claim is still its
	// own term with its own token.
	Holder string
	// Duration is the guarantee a check can give ("leader for at least
	// Duration"). The tracker claims and extends for 2×Duration, so a
	// check for Duration is answered from cache for most of a term.
	Duration time.Duration
	// RenewFraction is the fraction of the validity obtained by a claim
	// or extend after which the tracker extends again: lower renews more
	// often and leaves more time for retries. Zero means 0.5; any other
	// value must be in (0, 1).
	RenewFraction float64
	// Jitter brings each renewal forward by a random fraction, up to
	// Jitter, of its interval, so that trackers spread their calls; it
	// never makes a renewal later. Retries after an ambiguous failure or a
	// lost term are shortened by up to half their delay (or Jitter, if
	// larger), so that trackers whose calls failed together — thousands
	// started at once against a store that bounds its calls in flight — do
	// not retry in lock-step. Zero means 0.1; a negative value turns all
	// jitter off (tests with a testclock usually want that); it must be
	// below 1.
	Jitter float64
	// Margin is taken off every deadline (until = sent + granted − Margin)
	// to cover the drift between this clock and the store's. Zero means
	// Duration/10; it must be below Duration.
	Margin time.Duration
	// RetryDelay caps the backoff between attempts after an ambiguous
	// failure (which starts at RetryDelay/8 and doubles), and is the
	// interval between claims while another holder has the lease. Zero
	// means Duration/10; it must be at most Duration/2, so that the tracker
	// reconfirms soon after the store recovers.
	RetryDelay time.Duration
	// CallTimeout bounds each store call; a call that runs out is
	// ambiguous. A call is also cut off when the validity it would extend
	// runs out. Zero means Duration/4; it must be at most Duration.
	CallTimeout time.Duration
	// LateTimer is how late a renewal timer may fire before the tracker
	// suspects that the process was paused (a VM frozen, a stop signal,
	// a GC stall) and downgrades to Unknown until the store confirms the
	// lease again. Zero means Margin.
	LateTimer time.Duration
	// ReleaseOnClose makes Close revoke the held term, so that a successor
	// can claim at once instead of waiting up to 2×Duration for the term to
	// run out. The trade-off: work this process started under the lease
	// may still be finishing when the successor starts, so only resources
	// that check the fencing token are safe; without release, no successor
	// can start before the term ends.
	ReleaseOnClose bool
	// Clock times everything. If it's nil, clock.WallClock will be used.
	Clock clock.Clock
}

// maxDuration keeps 2×Duration, and deadlines a term ahead, from overflowing.
const maxDuration = time.Duration(math.MaxInt64 / 4)

// Validate returns an error satisfying errors.Is(err, errors.NotValid)
// (github.com/juju/errors) if the Config cannot be used.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.NotValidf("nil Store")
	case c.Name == "":
		return errors.NotValidf("empty Name")
	case c.Holder == "":
		return errors.NotValidf("empty Holder")
	case c.Duration <= 0:
		return errors.NotValidf("Duration %v (must be positive)", c.Duration)
	case c.Duration > maxDuration:
		return errors.NotValidf("Duration %v (must be at most %v: leases are claimed for 2×Duration)", c.Duration, maxDuration)
	case !(c.RenewFraction >= 0 && c.RenewFraction < 1): // also rejects NaN
		return errors.NotValidf("RenewFraction %v (must be in (0, 1), or 0 for the default 0.5)", c.RenewFraction)
	case c.Jitter != c.Jitter || c.Jitter >= 1: // NaN or too large
		return errors.NotValidf("Jitter %v (must be below 1)", c.Jitter)
	case c.Margin < 0 || c.Margin >= c.Duration:
		return errors.NotValidf("Margin %v (must be in [0, Duration=%v))", c.Margin, c.Duration)
	case c.RetryDelay < 0 || c.RetryDelay > c.Duration/2:
		return errors.NotValidf("RetryDelay %v (must be in [0, Duration/2=%v])", c.RetryDelay, c.Duration/2)
	case c.CallTimeout < 0 || c.CallTimeout > c.Duration:
		return errors.NotValidf("CallTimeout %v (must be in [0, Duration=%v])", c.CallTimeout, c.Duration)
	case c.LateTimer < 0:
		return errors.NotValidf("LateTimer %v (must not be negative)", c.LateTimer)
	}
	return nil
}

// retryJitter is the least jitter of the retry backoff while jitter is on:
// "equal jitter", each delay drawn from [d/2, d]. Renewals need only a
// small spread, being scheduled from each tracker's own claim time; retries
// after a failure shared by many trackers start in step and need more.
const retryJitter = 0.5

// retryPolicy is the backoff after ambiguous failures: RetryDelay/8,
// doubling to RetryDelay, jittered. c must have its defaults.
func (c Config) retryPolicy() backoff.Policy {
	jitter := c.Jitter
	if jitter > 0 {
		jitter = max(jitter, retryJitter)
	}
	return backoff.Policy{Min: max(c.RetryDelay/8, 1), Max: c.RetryDelay, Jitter: jitter}
}

// withDefaults returns c with every zero knob set to its default.
func (c Config) withDefaults() Config {
	if c.RenewFraction == 0 {
		c.RenewFraction = 0.5
	}
	switch {
	case c.Jitter == 0:
		c.Jitter = 0.1
	case c.Jitter < 0:
		c.Jitter = 0
	}
	if c.Margin == 0 {
		c.Margin = c.Duration / 10
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = c.Duration / 10
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = 1 // a 1ns Duration still gets a positive delay
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.Duration / 4
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 1
	}
	if c.LateTimer == 0 {
		c.LateTimer = c.Margin
	}
	if c.Clock == nil {
		c.Clock = clock.WallClock
	}
	return c
}
