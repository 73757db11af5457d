package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
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

// TestVMPauseOnTheHostClock: on the wall clock and this host's own clocks,
// a wall clock that has gained 40 s on the monotonic one since the claim,
// with no boot time gained (a VM paused and its clock corrected), makes the
// first Check after it answer Unknown; the store confirms at once, and the
// next Check is Held again.
func TestVMPauseOnTheHostClock(t *testing.T) {
	host := &lockedClock{c: newHostClock(bootSlept)}
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	cfg := Config{Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second}
	cfg.clocks = host
	tr, err := NewTracker(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, tr.Close()) }()
	ctx := context.Background()
	st, err := tr.Check(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, Held, st.State)

	host.mu.Lock()
	host.c.epochWall = host.c.epochWall.Add(-40 * time.Second) // the wall clock is 40 s further ahead
	host.mu.Unlock()
	cur, _ := tr.Current()
	assert.Equal(t, Unknown, cur.State, "no promise on a clock that may have stopped")
	st, err = tr.Check(ctx, 0)
	require.NoError(t, err, "MemStore confirms the same term")
	assert.Equal(t, Held, st.State)
	assert.Equal(t, uint64(1), tr.Report().Calls.Extend.OK, "one store call")
}

// lockedClock is a hostClock whose epoch a test may move, under mu.
type lockedClock struct {
	mu sync.Mutex
	c  *hostClock
}

func (l *lockedClock) read(now time.Time) clockReading {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.read(now)
}
