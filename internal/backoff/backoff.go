// Package backoff is coldstart's one jittered, capped exponential backoff,
// timed on an injected clock; every retry loop in the library uses it.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/juju/clock"
)

// Policy describes a backoff: the first delay is Min, each later one
// doubles, and none exceeds Max. Jitter, in [0, 1], shortens each delay by
// a random fraction of up to Jitter: 0 is no jitter, 0.5 draws from
// [d/2, d], 1 is "full jitter" over [0, d].
type Policy struct {
	Min, Max time.Duration
	Jitter   float64
}

// Delay is the un-jittered delay before retry n (n ≥ 1; n ≤ 1 gives Min):
// Min·2ⁿ⁻¹ capped at Max. It saturates at Max rather than overflow.
func (p Policy) Delay(n int) time.Duration {
	d := max(p.Min, 0)
	for i := 1; i < n && d < p.Max; i++ {
		if d > p.Max/2 { // doubling would pass the cap (or overflow)
			return p.Max
		}
		d = max(2*d, 1)
	}
	return min(d, p.Max)
}

// Next is Delay(n) with the policy's jitter applied.
func (p Policy) Next(n int) time.Duration {
	return Jitter(p.Delay(n), p.Jitter)
}

// Jitter shortens d by a random fraction of up to frac (clamped to
// [0, 1]): the result lies in [d·(1−frac), d].
func Jitter(d time.Duration, frac float64) time.Duration {
	frac = min(max(frac, 0), 1)
	if d <= 0 || frac == 0 {
		return d
	}
	return d - Duration(float64(d)*frac*rand.Float64())
}

// Duration converts a float of nanoseconds to a Duration, saturating at 0
// and math.MaxInt64 (see DESIGN.md).
func Duration(ns float64) time.Duration {
	switch {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= 0:
		return 0
	}
	return time.Duration(ns)
}

// Backoff counts consecutive failures under a Policy. Its zero value
// (with a Policy set) is ready before the first failure. It is not safe
// for concurrent use: each retry loop owns one.
type Backoff struct {
	Policy
	n int
}

// Next records one more failure and returns the jittered delay to wait
// before the next try.
func (b *Backoff) Next() time.Duration {
	if b.n < math.MaxInt {
		b.n++
	}
	return b.Policy.Next(b.n)
}

// Reset forgets the failures: the next delay is Min again.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d on clk, or until ctx ends, whichever is first; it returns
// ctx.Err() in the latter case. A d ≤ 0 returns at once (nil unless ctx
// has already ended).
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}

// SleepUntil is Sleep that ends early when done closes; it reports
// whether the full wait elapsed (false: done closed first).
func SleepUntil(done <-chan struct{}, clk clock.Clock, d time.Duration) bool {
	select {
	case <-done:
		return false
	default:
	}
	if d <= 0 {
		return true
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.Chan():
		return true
	}
}
