package spread_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/upgrade/internal/spread"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRange(t *testing.T) {
	for _, tc := range []struct {
		r, unit time.Duration
		lo, hi  int64
	}{
		{time.Second, time.Second, 1, 2},
		{4 * time.Second, time.Second, 4, 8},
		{1500 * time.Millisecond, time.Second, 2, 3}, // never earlier than asked, never past R + spread
		{200 * time.Millisecond, time.Second, 1, 1},  // at least one unit
		{0, time.Second, 1, 1},
		{-time.Second, time.Second, 1, 1},
		{time.Second, time.Millisecond, 1000, 2000},
		{1500 * time.Microsecond, time.Millisecond, 2, 3},
		{math.MaxInt64, time.Second, 9223372037, 9223372037 + 9223372036},
		{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64}, // saturates
	} {
		lo, hi := spread.Range(tc.r, tc.unit)
		assert.Equal(t, [2]int64{tc.lo, tc.hi}, [2]int64{lo, hi}, "Range(%v, %v)", tc.r, tc.unit)
	}
}

func TestDrawCoversTheRangeAndNothingElse(t *testing.T) {
	seen := map[int64]int{}
	for range 2000 {
		v := spread.Draw(4, 8)
		assert.True(t, v >= 4 && v <= 8, "%d outside [4, 8]", v)
		seen[v]++
	}
	assert.Len(t, seen, 5, "every value in [4, 8] is drawn: %v", seen)
	for v, n := range seen {
		assert.Greater(t, n, 200, "value %d drawn %d times of 2000: not uniform", v, n)
	}
	assert.Equal(t, int64(3), spread.Draw(3, 3))
	assert.Equal(t, int64(3), spread.Draw(3, 1))
	for range 100 {
		assert.GreaterOrEqual(t, spread.Draw(1, math.MaxInt64), int64(1))
		assert.GreaterOrEqual(t, spread.Draw(math.MinInt64, math.MaxInt64), int64(math.MinInt64))
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = spread.Draw(1000, 2000) }))
}
