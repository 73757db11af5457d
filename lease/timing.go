package lease

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// Timing is what a Config promises (see Config.Timing): the worst cases a
// person plans for, and the load on the store. The figures are for a store
// that answers at once and grants what it is asked (MemStore); where a
// ReleaseWatcher's follower differs from a polling one, each field says
// both. DESIGN.md, "Timing's figures", says what a real store adds.
type Timing struct {
	// Outage is how long a holder is sure to answer Held through a store
	// outage before it answers Unknown: its promise, 2×Duration − Margin,
	// less the renewal interval, RenewFraction of it. From the promise's end on,
	// Current and Report say Unknown, and so does Check — after waiting
	// for the store call it asks for, up to the call timeout (Duration/4) unless its ctx
	// ends sooner.
	Outage time.Duration
	// CrashTakeover is the longest a successor waits to hold the lease
	// after its holder died without releasing it: the term, 2×Duration,
	// plus, with a store that watches, the wake spread (a random delay of
	// at most ClaimInterval/10, capped at 1ms), else a ClaimInterval.
	CrashTakeover time.Duration
	// GracefulTakeover is the longest a successor waits to hold the lease
	// after its holder released it (ReleaseOnClose, StepDown): the wake
	// spread with a store that watches, else a ClaimInterval. A release
	// the store does not confirm is a crash takeover; a failed watch gives
	// the figures of a store that does not watch.
	GracefulTakeover time.Duration
	// ClockDrift is how much slower than the store's clock this host's
	// clock may run, as a fraction, with every promise still ending
	// before the store's term: Margin / (2×Duration), 0.05 with the
	// default Margin (see Config.Margin).
	ClockDrift float64
	// RenewRate is the renewal calls per second that 1,000 leases, each
	// held by one tracker, send to the store in steady state: 1,000 over
	// the mean renewal interval, (2×Duration − Margin) × RenewFraction,
	// shortened by 5 % on average (each comes early by up to a tenth).
	RenewRate float64
	// ClaimRate is the claim calls per second of one follower waiting
	// while another holds the lease: with a store that watches, one per
	// term (2×Duration), the fallback in case the watch goes silent; with
	// one that does not, one per ClaimInterval. Each wait is shortened by
	// 5 % on average.
	ClaimRate float64
}

// Timing returns what c promises, with its defaults applied, following the
// tracker's schedule (DESIGN.md, "Timing's figures"). Store tells whether
// the follower's figures are a watch's (a ReleaseWatcher) or a poll's (any
// other Store, or nil). Name and Holder need not be set; for a Config whose
// timing fields do not Validate, Timing returns the zero Timing.
func (c Config) Timing() Timing {
	if c.Name == "" {
		c.Name = "timing"
	}
	if c.Holder == "" {
		c.Holder = "timing"
	}
	if c.Validate() != nil {
		return Timing{}
	}
	c = c.withDefaults()
	promise := 2*c.Duration - c.Margin
	// As Tracker.confirmed schedules a renewal, before jitter.
	renew := backoff.Duration(float64(promise) * c.RenewFraction)
	meanShare := 1 - c.jitter(renewJitter)/2 // a wait d is drawn from [d·(1−renewJitter), d]
	// As Tracker.lost schedules the next claim after a refused one, and
	// the wait after a watch says the holder's term is over.
	takeover, claimEvery := c.ClaimInterval, c.ClaimInterval
	if _, ok := c.Store.(leasestore.ReleaseWatcher); ok {
		takeover, claimEvery = c.wakeSpread(), 2*c.Duration
	}
	return Timing{
		Outage:           promise - renew,
		CrashTakeover:    2*c.Duration + takeover,
		GracefulTakeover: takeover,
		ClockDrift:       c.rateTolerance(),
		RenewRate:        1000 / (renew.Seconds() * meanShare),
		ClaimRate:        1 / (claimEvery.Seconds() * meanShare),
	}
}

// String says the figures in words, to three significant digits.
func (t Timing) String() string {
	return fmt.Sprintf("tolerates a store outage of %v before answering Unknown; "+
		"a crash takeover takes at most %v, a graceful one at most %v; "+
		"tolerates a clock %s%% slower than the store's; "+
		"1,000 held leases cost %s renewal calls/s, a waiting follower %s claim calls/s",
		round3(t.Outage), round3(t.CrashTakeover), round3(t.GracefulTakeover),
		num3(100*t.ClockDrift), num3(t.RenewRate), num3(t.ClaimRate))
}

// round3 rounds d to three significant digits.
func round3(d time.Duration) time.Duration {
	if d < 1000 {
		return d
	}
	unit := time.Duration(math.Pow10(int(math.Floor(math.Log10(float64(d)))) - 2))
	return d.Round(unit)
}

// num3 prints x to three significant digits, never in exponent form.
func num3(x float64) string {
	if x >= 1000 || x <= 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return strconv.FormatFloat(math.Round(x), 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
