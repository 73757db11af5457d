package leasestore_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

func TestMemStoreContract(t *testing.T) {
	leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
		clk := testclock.NewClock(time.Unix(1_700_000_000, 0))
		return leasetest.Harness{
			Store:   leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}),
			Advance: clk.Advance,
			Term:    time.Minute,
		}
	})
}

// requireLost waits (boundedly) for a Lost channel to close.
func requireLost(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatal(why)
	}
}

func requireNotLost(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(why)
	default:
	}
}

func TestMemStoreLostOnRevokeAndTakeover(t *testing.T) {
	clk := testclock.NewClock(t0)
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	ctx := context.Background()
	a, err := m.Claim(ctx, "l", "a", time.Minute)
	require.NoError(t, err)
	lostA := m.Lost(ctx, a)
	other, err := m.Claim(ctx, "other", "a", time.Minute)
	require.NoError(t, err)
	lostOther := m.Lost(ctx, other)
	_, err = m.Extend(ctx, a, time.Minute)
	require.NoError(t, err)
	requireNotLost(t, lostA, "an extend does not end the term")

	require.NoError(t, m.Revoke(ctx, a))
	requireLost(t, lostA, "a revoked term is lost")
	requireNotLost(t, lostOther, "another lease's term is unaffected")
	requireLost(t, m.Lost(ctx, a), "Lost of a term already over closes at once")

	// A claim ends a term that expired before its timer fired.
	b, err := m.Claim(ctx, "l", "b", time.Minute)
	require.NoError(t, err)
	lostB := m.Lost(ctx, b)
	clk.Advance(time.Minute) // expiry; the timer's callback runs concurrently
	_, err = m.Claim(ctx, "l", "c", time.Minute)
	require.NoError(t, err)
	requireLost(t, lostB, "a term taken over after expiry is lost")
	requireLost(t, m.Lost(ctx, leasestore.Grant{Name: "l", Holder: "a", Token: 99}), "an unknown term is over")
}

func TestMemStoreLostOnExpiryFollowsExtends(t *testing.T) {
	clk := testclock.NewClock(t0)
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	ctx := context.Background()
	g, err := m.Claim(ctx, "l", "a", time.Minute)
	require.NoError(t, err)
	lost := m.Lost(ctx, g)
	clk.Advance(30 * time.Second)
	_, err = m.Extend(ctx, g, time.Minute) // now expires at t0+90s
	require.NoError(t, err)
	clk.Advance(30 * time.Second) // the old expiry: the timer fires, finds the term live
	// The watch re-armed its timer for the new expiry (WaitAdvance waits
	// for exactly that one timer) and is still open just before it.
	require.NoError(t, clk.WaitAdvance(30*time.Second-time.Nanosecond, wait, 1))
	requireNotLost(t, lost, "an extended term is not lost at its old expiry")
	clk.Advance(time.Nanosecond)
	requireLost(t, lost, "the term expired on the store's clock")
}

// A watch whose ctx ended is dropped (its timer too) and reports nothing,
// even if the term ends before the drop.
func TestMemStoreLostStopsWithContext(t *testing.T) {
	clk := testclock.NewClock(t0)
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	g, err := m.Claim(context.Background(), "l", "a", time.Minute)
	require.NoError(t, err)
	ctx1, cancel1 := context.WithCancel(context.Background())
	lost1 := m.Lost(ctx1, g)
	require.Equal(t, 1, leasestore.MemStoreWatches(m))
	cancel1()
	deadline := time.After(wait)
	for leasestore.MemStoreWatches(m) != 0 {
		select {
		case <-deadline:
			t.Fatalf("%d watches left after their ctx ended", leasestore.MemStoreWatches(m))
		default:
			runtime.Gosched()
		}
	}
	// No expiry timer is left either: WaitAdvance finds none.
	require.Error(t, clk.WaitAdvance(time.Hour, 0, 1), "a dropped watch left its timer")

	ctx2, cancel2 := context.WithCancel(context.Background())
	lost2 := m.Lost(ctx2, g)
	cancel2()
	require.NoError(t, m.Revoke(context.Background(), g)) // perhaps before the drop
	requireNotLost(t, lost1, "a cancelled watch must not report the term lost")
	requireNotLost(t, lost2, "a cancelled watch must not report the term lost")
	requireNotLost(t, m.Lost(ctx2, g), "a watch begun with an ended ctx reports nothing")
}

// The StepLog of an HA group's upgrade: only the current term's token
// records a step; a deposed holder's record is refused and leaves no trace.
func TestMemStoreRecordsStepsUnderTheCurrentToken(t *testing.T) {
	ctx := context.Background()
	clk := testclock.NewClock(time.Unix(1_700_000_000, 0))
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	old, err := m.Claim(ctx, "upgrade", "controller-0", time.Minute)
	require.NoError(t, err)
	require.NoError(t, m.RecordStep(ctx, "upgrade", old.Token, "schema-7"))
	require.NoError(t, m.RecordStep(ctx, "upgrade", old.Token, "schema-7"), "twice is not an error")

	clk.Advance(time.Minute) // old's term expires
	err = m.RecordStep(ctx, "upgrade", old.Token, "schema-8")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "an expired term records nothing")
	cur, err := m.Claim(ctx, "upgrade", "controller-1", time.Minute)
	require.NoError(t, err)
	err = m.RecordStep(ctx, "upgrade", old.Token, "schema-8")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "a deposed holder records nothing")
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Equal(t, "controller-1", nh.Holder)
	require.NoError(t, m.RecordStep(ctx, "upgrade", cur.Token, "schema-8"))
	require.NoError(t, m.RecordStep(ctx, "upgrade", cur.Token, "schema-7"), "its predecessor's step, again")

	done, err := m.StepsDone(ctx, "upgrade")
	require.NoError(t, err)
	require.Equal(t, []string{"schema-7", "schema-8"}, done, "in the order recorded, once each")
	done, err = m.StepsDone(ctx, "other")
	require.NoError(t, err)
	require.Empty(t, done)
	require.Error(t, m.RecordStep(ctx, "upgrade", cur.Token, "bad\nstep"), "a step is named as a lease is")
}
