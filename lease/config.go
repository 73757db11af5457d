package lease

import (
	"log/slog"
	"math"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/juju/clock"
	"github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// Config configures a Tracker. Store, Name, Holder and Duration are
// required; every other zero value has the default its comment gives.
// Validate checks everything but Store, so settings (flags) can be checked
// before the store is dialled; NewTracker also requires Store. Timing says
// what the settings promise.
//
// The rest of the timing follows from Duration: each store call is cut
// off after Duration/4 (ambiguous if it runs out); retries after an
// ambiguous failure back off from Duration/80 to Duration/10; scheduled
// calls come early by a random tenth at most, never late. A test that
// asserts times steps its clock by the un-jittered wait, or to
// Report.NextCall (leasetest.Step). See DESIGN.md, "Derived timing".
type Config struct {
	// Store is where the lease is claimed and extended.
	Store leasestore.Store
	// Name is the lease, e.g. "singular-controller".
	Name string
	// Holder names this party; it is what other trackers' ErrNotLeader
	// reports. Two processes may use the same name: each claim is still its
	// own term with its own token.
	//
	// Name and Holder are each 1 to 253 bytes of UTF-8 text without
	// control characters (leasestore.CheckName).
	Holder string
	// Duration is the guarantee a check can give ("leader for at least
	// Duration"). The tracker claims and extends for 2×Duration, so a
	// check for Duration is answered from cache for most of a term, and a
	// successor waits up to about 2×Duration after a holder dies without
	// releasing (Timing.CrashTakeover). It must be at least 100ms
	// (DESIGN.md, "The least settings").
	Duration time.Duration
	// RenewFraction is the fraction of the validity obtained by a claim
	// or extend after which the tracker extends again: lower renews more
	// often (Timing.RenewRate) and rides a longer store outage
	// (Timing.Outage). Zero means 0.5; any other value must be in
	// [0.01, 1).
	RenewFraction float64
	// Margin is taken off every deadline (until = sent + granted − Margin)
	// so that a promise ends before the store's term while this clock runs
	// slower than every store leader's by less than Margin / granted:
	// Margin / (2×Duration), 5 % with the default (Timing.ClockDrift;
	// DESIGN.md, "Clock drift").
	//
	// A renewal timer that fires late (a process starved of CPU, throttled
	// by its cgroup, stalled by the GC) demotes nothing: those leave the
	// monotonic clock running, so the deadline stays exact. It renews at
	// once, and one late by more than Margin/4 is counted and explained
	// (Report.LateRenewals). Zero means Duration/10; any other value must
	// be at least 10ms (the Go scheduler's preemption period) and below
	// Duration.
	Margin time.Duration
	// ClaimInterval is the wait between claims while another holder has
	// the lease and the Store is not a ReleaseWatcher (or its watch
	// failed): Timing.GracefulTakeover and Timing.ClaimRate follow from
	// it. A follower woken by a ReleaseWatcher claims after a random delay
	// of at most ClaimInterval/10, capped at 5ms, and otherwise once a
	// term (2×Duration). Zero means Duration/10; any other value must be
	// at least 10ms and at most Duration.
	ClaimInterval time.Duration
	// ReleaseOnClose makes Close revoke the held term, once the functions
	// Lead runs have returned, so that a successor can claim at once
	// instead of after the term; guard work done outside Lead with the
	// fencing token (DESIGN.md, "Hand-over").
	ReleaseOnClose bool
	// Clock times everything. If it's nil, clock.WallClock will be used.
	// With a Clock whose times carry Go's monotonic reading (the wall
	// clock), the tracker sees when that clock may have stopped since the
	// store last confirmed (DESIGN.md, "A stopped clock"): a suspend of
	// the host (on Linux, CLOCK_BOOTTIME gained on CLOCK_MONOTONIC) and a
	// paused VM (the wall clock gained on the monotonic one, once the
	// guest's wall clock is corrected). Check, Current and Report then say
	// Unknown at once and the tracker asks the store again; Lead functions
	// see their ctx end once that Unknown is published. What it cannot
	// see (a suspend off Linux, a guest whose wall clock is not corrected
	// yet, other clocks), a promise outlasts the lease by: fence with
	// Status.Token.
	Clock clock.Clock
	// Logger receives one record per change of the tracker's state, per
	// release, and per start and end of a Lead (or WithLeadership) run;
	// docs/catalogue.md lists their messages, levels and keys. A routine
	// renewal, a retry that changes nothing and Check never log. nil means
	// no logs.
	Logger *slog.Logger

	// clocks replaces the host's clocks (tests inject a suspend or a VM
	// pause), load what explains a late renewal (tests inject a cause).
	clocks clockMeter
	load   loadMeter
	// noJitter makes every wait exact (tests that assert schedules).
	noJitter bool
}

// The timing a Config does not ask for, and the bounds of what it may ask;
// DESIGN.md, "Derived timing", says why each is what it is.
const (
	renewJitter  = 0.1 // the most a scheduled call comes early, as a fraction of its interval
	retryJitter  = 0.5 // the most a retry comes early, as a fraction of its delay
	retryDivisor = 10  // retries back off to Duration/retryDivisor, from an eighth of that
	callDivisor  = 4   // each store call is cut off after Duration/callDivisor
	// renewLatencies is the validity, in the store's recent latencies, a
	// renewal leaves ahead of it at least, where RenewFraction would leave
	// less (Tracker.renewalIn).
	renewLatencies = 4

	minRenewFraction = 0.01
	maxDuration      = time.Duration(math.MaxInt64 / 4) // 2×Duration must not overflow
	minDuration      = 100 * time.Millisecond
	minMargin        = 10 * time.Millisecond
	minClaimInterval = 10 * time.Millisecond
	maxWakeSpread    = time.Millisecond // caps the delay of a claim a release wakes
)

// Validate returns an error satisfying errors.Is(err, errors.NotValid)
// (github.com/juju/errors) if the settings cannot be used. It does not
// look at Store, which may still be nil: NewTracker checks that.
func (c Config) Validate() error {
	if err := leasestore.CheckName("Name", c.Name); err != nil {
		return err
	}
	if err := leasestore.CheckName("Holder", c.Holder); err != nil {
		return err
	}
	switch {
	case c.Duration < minDuration:
		return errors.NotValidf("Duration %v (must be at least %v: the tracker cuts each store call off after Duration/4, and retries from Duration/80)", c.Duration, minDuration)
	case c.Duration > maxDuration:
		return errors.NotValidf("Duration %v (must be at most %v: leases are claimed for 2×Duration)", c.Duration, maxDuration)
	case !(c.RenewFraction == 0 || c.RenewFraction >= minRenewFraction && c.RenewFraction < 1): // also rejects NaN
		return errors.NotValidf("RenewFraction %v (must be in [%v, 1), or 0 for the default 0.5)", c.RenewFraction, minRenewFraction)
	case c.Margin != 0 && (c.Margin < minMargin || c.Margin >= c.Duration):
		return errors.NotValidf("Margin %v (must be in [%v, Duration=%v), or 0 for the default Duration/10)", c.Margin, minMargin, c.Duration)
	case c.ClaimInterval != 0 && (c.ClaimInterval < minClaimInterval || c.ClaimInterval > c.Duration):
		return errors.NotValidf("ClaimInterval %v (must be in [%v, Duration=%v], or 0 for the default Duration/10)", c.ClaimInterval, minClaimInterval, c.Duration)
	}
	return nil
}

// retryPolicy is the backoff after ambiguous failures: from Duration/80,
// doubling to Duration/10, shortened by up to retryJitter. c must have its
// defaults.
func (c Config) retryPolicy() backoff.Policy {
	d := max(c.Duration/retryDivisor, 1)
	return backoff.Policy{Min: max(d/8, 1), Max: d, Jitter: c.jitter(retryJitter)}
}

// callTimeout bounds each store call: Duration/4.
func (c Config) callTimeout() time.Duration { return max(c.Duration/callDivisor, 1) }

// jitter is the fraction j of a wait by which it may come early, or none
// where the test seam turned jitter off.
func (c Config) jitter(j float64) float64 {
	if c.noJitter {
		return 0
	}
	return j
}

// withDefaults returns c with every zero knob set to its default.
func (c Config) withDefaults() Config {
	if c.RenewFraction == 0 {
		c.RenewFraction = 0.5
	}
	if c.Margin == 0 {
		c.Margin = c.Duration / 10
	}
	if c.ClaimInterval == 0 {
		c.ClaimInterval = max(c.Duration/10, 1)
	}
	if c.Clock == nil {
		c.Clock = clock.WallClock
	}
	return c
}

// wakeSpread is the most a follower woken by a release waits before it
// claims: ClaimInterval/10, at most maxWakeSpread (none where the test
// seam turned jitter off). c must have its defaults.
func (c Config) wakeSpread() time.Duration {
	if c.noJitter {
		return 0
	}
	return min(c.ClaimInterval/10, maxWakeSpread)
}

// claimDelay is the wait before the next claim while another holder has
// the lease and no watch will say when it lets go.
func (c Config) claimDelay() time.Duration {
	return backoff.Jitter(c.ClaimInterval, c.jitter(renewJitter))
}

// fallbackClaimDelay is the wait before the next claim while a
// ReleaseWatcher watches the holder's term: one term, 2×Duration (DESIGN.md,
// "Followers"). c must have its defaults.
func (c Config) fallbackClaimDelay() time.Duration {
	return backoff.Jitter(2*c.Duration, c.jitter(renewJitter))
}

// rateTolerance is how much slower than the store's clock this tracker's
// clock may run and every promise still end before the store's term does:
// Margin / (2×Duration). DESIGN.md, "Clock drift", derives it.
func (c Config) rateTolerance() float64 {
	c = c.withDefaults()
	return float64(c.Margin) / float64(2*c.Duration)
}
