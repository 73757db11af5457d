package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHostClockReadsTheKernelOnlyWhenWallMovesAgainstMonotonic(t *testing.T) {
	require.NotNil(t, hostClocks.(*hostClock).bootSlept, "CLOCK_BOOTTIME is readable on Linux")
	s, ok := bootSlept()
	require.True(t, ok)
	assert.GreaterOrEqual(t, s, -suspendTolerance, "BOOTTIME is never behind MONOTONIC")

	c := newHostClock(bootSlept)
	// Wall and monotonic agree with the cached reading: no system call.
	c.last.Store(&clockReading{slept: 42 * time.Second})
	r := c.read(time.Now())
	assert.Equal(t, 42*time.Second, r.slept)
	assert.InDelta(t, 0, float64(r.skew), float64(suspendTolerance), "no step since the epoch")
	// A time with no monotonic reading cannot show a suspend, nor a step.
	assert.Equal(t, clockReading{slept: 42 * time.Second}, c.read(time.Now().Round(0)))
	// The wall clock moved an hour against the monotonic one since the
	// cached reading (a suspend, a paused VM, or the clock set): read the
	// kernel again.
	c.last.Store(&clockReading{skew: time.Hour, slept: 42 * time.Second})
	got := c.read(time.Now())
	assert.InDelta(t, float64(s), float64(got.slept), float64(suspendTolerance), "the kernel's reading")
	assert.InDelta(t, 0, float64(c.last.Load().skew), float64(suspendTolerance), "and the skew it was taken at")
}
