package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBootClockReadsTheKernelOnlyWhenWallMovesAgainstMonotonic(t *testing.T) {
	require.NotNil(t, hostSleep, "CLOCK_BOOTTIME is readable on Linux")
	s, ok := bootSlept()
	require.True(t, ok)
	assert.GreaterOrEqual(t, s, -suspendTolerance, "BOOTTIME is never behind MONOTONIC")

	b := newBootClock()
	// Wall and monotonic agree with the cached reading: no system call.
	b.last.Store(&bootReading{slept: 42 * time.Second})
	assert.Equal(t, 42*time.Second, b.slept(time.Now()))
	// A time with no monotonic reading cannot show a suspend.
	assert.Equal(t, 42*time.Second, b.slept(time.Now().Round(0)))
	// The wall clock moved an hour against the monotonic one since the
	// cached reading (a suspend, or the clock set): read the kernel again.
	b.last.Store(&bootReading{skew: time.Hour, slept: 42 * time.Second})
	got := b.slept(time.Now())
	assert.InDelta(t, float64(s), float64(got), float64(suspendTolerance), "the kernel's reading")
	assert.InDelta(t, 0, float64(b.last.Load().skew), float64(suspendTolerance), "and the skew it was taken at")
}
