package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBootClockReadsTheKernelOnlyWhenWallMovesAgainstMonotonic(t *testing.T) {
	require.IsType(t, &bootClock{}, hostClocks, "CLOCK_BOOTTIME is readable on Linux")
	s, ok := bootSlept()
	require.True(t, ok)
	assert.GreaterOrEqual(t, s, -suspendTolerance, "BOOTTIME is never behind MONOTONIC")

	b := newBootClock()
	// Wall and monotonic agree with the cached reading: no system call.
	b.last.Store(&bootReading{slept: 42 * time.Second})
	r := b.read(time.Now())
	assert.Equal(t, 42*time.Second, r.slept)
	assert.InDelta(t, 0, float64(r.skew), float64(suspendTolerance), "no step since the epoch")
	// A time with no monotonic reading cannot show a suspend, nor a step.
	assert.Equal(t, clockReading{slept: 42 * time.Second}, b.read(time.Now().Round(0)))
	// The wall clock moved an hour against the monotonic one since the
	// cached reading (a suspend, a paused VM, or the clock set): read the
	// kernel again.
	b.last.Store(&bootReading{skew: time.Hour, slept: 42 * time.Second})
	got := b.read(time.Now())
	assert.InDelta(t, float64(s), float64(got.slept), float64(suspendTolerance), "the kernel's reading")
	assert.InDelta(t, 0, float64(b.last.Load().skew), float64(suspendTolerance), "and the skew it was taken at")
}

// TestSkewClockSeesTheWallClockStepped: a time whose wall reading is ahead
// of its monotonic one by d (what a corrected VM clock gives) reads a skew
// of d; Go's monotonic arithmetic is what makes it cheap.
func TestSkewClockSeesTheWallClockStepped(t *testing.T) {
	c := newSkewClock()
	now := time.Now()
	assert.InDelta(t, 0, float64(c.skew(now)), float64(suspendTolerance))
	// Shift the epoch's wall reading back 5 s, as if the wall clock had
	// since been stepped 5 s ahead.
	c.epochWall = c.epochWall.Add(-5 * time.Second)
	assert.InDelta(t, float64(5*time.Second), float64(c.skew(now)), float64(suspendTolerance))
	assert.Equal(t, pauseError{jump: 5 * time.Second}.Error(),
		clockStopped(clockReading{}, clockReading{skew: 5 * time.Second}).Error())
}
