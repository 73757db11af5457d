// Package spread draws the wait a server hands one refused caller, shared
// by upgrade's HTTP refusals (Retry-After, whole seconds) and grpcupgrade's
// (grpc-retry-pushback-ms, milliseconds): a gate asking for R answers each
// refusal with a value drawn uniformly from [R, 2R]. MaxWait is the longest
// wait either client reads from a hint. See upgrade/DESIGN.md.
package spread

import (
	"math"
	"math/rand/v2"
	"time"
)

// MaxWait bounds the wait a refusal's hint can ask of a client, as both
// clients read it (upgrade's Retry-After, grpcupgrade's RetryInfo): a
// longer one is read as this long.
const MaxWait = time.Hour

// Range is the whole units [lo, hi] a refusal's hint is drawn from for a
// gate asking for r: lo is r rounded up to a unit, and at least 1; hi
// adds r rounded down to units (so hi never passes 2r). unit must be
// positive.
func Range(r, unit time.Duration) (lo, hi int64) {
	r = max(r, 0)
	down := int64(r / unit)
	lo = down
	if r%unit != 0 {
		lo++
	}
	lo = max(lo, 1)
	if down > math.MaxInt64-lo { // saturate rather than wrap
		return lo, math.MaxInt64
	}
	return lo, lo + down
}

// Draw returns a value drawn uniformly from [lo, hi] (lo when hi ≤ lo).
// It is safe for concurrent use and allocates nothing.
func Draw(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	if hi-lo == math.MaxInt64 || hi-lo < 0 { // the span overflows an int64
		return lo + rand.Int64N(math.MaxInt64)
	}
	return lo + rand.Int64N(hi-lo+1)
}
