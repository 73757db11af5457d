package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// component is gate.Component's shape, which a board follows; lease must
// not import gate.
type component interface {
	Completed() <-chan struct{}
	Failed() <-chan struct{}
	Cause() error
	Detail() string
}

var _ component = (*lease.Tracker)(nil)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestTrackerIsAComponentInItsOwnWords: while the tracker does not know,
// its entry stays locked and says why as Check would ("unknown: claim not
// confirmed: lease call timeout 250ms"), not only how long it has waited;
// it opens at Held and fails only at Close.
func TestTrackerIsAComponentInItsOwnWords(t *testing.T) {
	// Duration 1 s: each call is cut off after 250 ms.
	f := newFixture(t, func(cfg *lease.Config) { cfg.Duration = time.Second },
		func(f *fixture) { f.store.Always(leasetest.OpClaim, leasetest.Hang) })
	var c component = f.tr
	assert.Equal(t, "unknown: claim not confirmed: no answer from the store yet", c.Detail())
	f.waitBlocked(t)
	f.store.Always(leasetest.OpClaim, leasetest.Pass)
	require.NoError(t, f.clk.WaitAdvance(250*time.Millisecond, wait, 1))
	retry := f.nextIdle(t)
	// The FaultStore adds what its hung call returned when cut off.
	assert.Regexp(t, `^unknown: claim not confirmed: lease call timeout 250ms(: |$)`, c.Detail())
	assert.False(t, isClosed(c.Completed()), "Unknown is not known")
	assert.False(t, isClosed(c.Failed()))
	assert.NoError(t, c.Cause())

	f.clk.Advance(retry)
	st := f.nextState(t, lease.Held)
	select {
	case <-c.Completed():
	case <-time.After(wait):
		t.Fatal("Completed not closed at Held")
	}
	assert.Equal(t, "held until "+st.Until.Format(time.RFC3339Nano), c.Detail())
	assert.False(t, isClosed(c.Failed()), "a known tracker has not failed")
	assert.NoError(t, c.Cause())

	require.NoError(t, f.tr.Close())
	assert.True(t, isClosed(c.Failed()), "Close fails it")
	require.ErrorIs(t, c.Cause(), lease.ErrClosed)
	assert.Equal(t, "closed", c.Detail())
	assert.True(t, isClosed(c.Completed()), "and Completed stays closed")
}

// TestTrackerComponentOpensAtNotHeld: knowing that another holder leads
// is knowing; the entry opens.
func TestTrackerComponentOpensAtNotHeld(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture) {
		_, err := f.mem.Claim(context.Background(), "singular", "unit-1", time.Hour)
		require.NoError(t, err)
	})
	var c component = f.tr
	f.nextState(t, lease.NotHeld)
	assert.True(t, isClosed(c.Completed()))
	assert.Equal(t, `not-held: not the leader: held by "unit-1"`, c.Detail())
}
