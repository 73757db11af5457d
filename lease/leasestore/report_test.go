package leasestore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// TestMemStoreReportCountsEachCallByClass: every call of each operation is
// counted once, in its class (see leasestore.Store).
func TestMemStoreReportCountsEachCallByClass(t *testing.T) {
	ctx := context.Background()
	clk := testclock.NewClock(t0)
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	var _ leasestore.Reporter = m
	assert.Equal(t, leasestore.Report{}, m.StoreReport(), "nothing yet")

	g, err := m.Claim(ctx, "l", "a", dur)
	require.NoError(t, err)
	_, err = m.Claim(ctx, "l", "b", dur)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	g, err = m.Extend(ctx, g, dur)
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Extend(cancelled, g, dur)
	require.ErrorIs(t, err, context.Canceled) // ambiguous by Store's rule
	require.NoError(t, m.Revoke(ctx, g))
	_, err = m.Extend(ctx, g, dur)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	require.ErrorIs(t, m.Revoke(ctx, g), leasestore.ErrNotHeld)
	_, err = m.Holder(ctx, "l")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "Holder is not counted")

	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 1, Definitive: 1},
		Extend: leasestore.Calls{OK: 1, Definitive: 1, Ambiguous: 1},
		Revoke: leasestore.Calls{OK: 1, Definitive: 1},
	}, m.StoreReport())
}

// TestStoreCountersClassifyAndCountInFlight: a call is in flight from its
// Begin to its done, and its error is classed as Store says, wrapped or
// not.
func TestStoreCountersClassifyAndCountInFlight(t *testing.T) {
	var c leasestore.Counters
	claim := c.Begin(leasestore.OpClaim)
	extend := c.Begin(leasestore.OpExtend)
	revoke := c.Begin(leasestore.OpRevoke)
	assert.Equal(t, 3, c.StoreReport().InFlight)
	claim(&leasestore.HeldError{Name: "l", Holder: "b"})
	extend(fmt.Errorf("store: %w", leasestore.ErrNotSent))
	assert.Equal(t, 1, c.StoreReport().InFlight)
	revoke(errors.New("connection reset"))
	c.Begin(leasestore.OpExtend)(fmt.Errorf("wrapped: %w", &leasestore.NotHeldError{Name: "l", Token: 3}))
	c.Begin(leasestore.OpClaim)(nil)
	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 1, Definitive: 1},
		Extend: leasestore.Calls{Definitive: 1, NotSent: 1},
		Revoke: leasestore.Calls{Ambiguous: 1},
	}, c.StoreReport())
}

// TestStoreCountersConcurrent: counts are exact under concurrent calls
// (run with -race).
func TestStoreCountersConcurrent(t *testing.T) {
	var c leasestore.Counters
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Begin(leasestore.OpExtend)(nil)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, leasestore.Report{Extend: leasestore.Calls{OK: 8000}}, c.StoreReport())
}

// TestCallErrorIsTheAmbiguousClass: a store's *leasestore.CallError matches
// ErrUnconfirmed and unwraps to its cause, unless the call was not sent —
// then it matches ErrNotSent only; it is never definitive, and counters
// class it as it says.
func TestCallErrorIsTheAmbiguousClass(t *testing.T) {
	sent := &leasestore.CallError{Store: "mystore", Op: leasestore.OpExtend, Name: "l", Holder: "a", Token: 7, Err: context.DeadlineExceeded}
	assert.ErrorIs(t, sent, leasestore.ErrUnconfirmed)
	assert.ErrorIs(t, sent, context.DeadlineExceeded)
	assert.NotErrorIs(t, sent, leasestore.ErrNotSent)
	assert.NotErrorIs(t, sent, leasestore.ErrNotHeld)
	assert.EqualError(t, sent, `mystore: extend lease "l" for "a" (token 7) unconfirmed: context deadline exceeded`)

	unsent := &leasestore.CallError{Store: "mystore", Op: leasestore.OpClaim, Name: "l", Holder: "a",
		Err: fmt.Errorf("%w: %w", leasestore.ErrNotSent, context.Canceled)}
	assert.ErrorIs(t, unsent, leasestore.ErrNotSent)
	assert.NotErrorIs(t, unsent, leasestore.ErrUnconfirmed, "certain, not ambiguous")
	assert.EqualError(t, unsent, `mystore: claim lease "l" for "a" not sent: lease call not sent: context canceled`)

	assert.ErrorIs(t, leasetest.ErrInjectedTimeout, leasestore.ErrUnconfirmed, "FaultStore's ambiguous answer is lease's class")
	assert.ErrorIs(t, fmt.Errorf("wrapped: %w", leasetest.ErrInjectedTimeout), leasetest.ErrInjectedTimeout)

	var c leasestore.Counters
	c.Begin(leasestore.OpExtend)(sent)
	c.Begin(leasestore.OpClaim)(unsent)
	assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{NotSent: 1}, Extend: leasestore.Calls{Ambiguous: 1}}, c.StoreReport())
}
