package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHostClockSeesTheWallClockStepped: a time whose wall reading is ahead
// of its monotonic one by d since the epoch (what a corrected VM clock
// gives) reads a skew of d; Go's monotonic arithmetic makes it cheap.
func TestHostClockSeesTheWallClockStepped(t *testing.T) {
	c := newHostClock(nil)
	now := time.Now()
	assert.InDelta(t, 0, float64(c.read(now).skew), float64(suspendTolerance))
	// Move the epoch's wall reading back 5 s, as if the wall clock had
	// since been stepped 5 s ahead.
	c.epochWall = c.epochWall.Add(-5 * time.Second)
	assert.InDelta(t, float64(5*time.Second), float64(c.read(time.Now()).skew), float64(suspendTolerance))
	assert.InDelta(t, float64(5*time.Second), float64(c.last.Load().skew), float64(suspendTolerance), "read afresh")
	assert.Equal(t, pauseError{jump: 5 * time.Second}.Error(),
		clockStopped(clockReading{}, clockReading{skew: 5 * time.Second}).Error())
	assert.NoError(t, clockStopped(clockReading{skew: 5 * time.Second}, clockReading{}), "set back: no evidence")
}
