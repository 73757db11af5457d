package leasetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

const wait = 5 * time.Second // real-time bound on the tests' own waits

func newTracker(t *testing.T, cfg lease.Config) *lease.Tracker {
	t.Helper()
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// Step drives a tracker through its renewals on a testclock, one store
// call each, with no sleeps; Settle reports where it waits.
func TestStepDrivesRenewals(t *testing.T) {
	clk, _, fs := newStores()
	tr := newTracker(t, lease.Config{Store: fs, Name: "l", Holder: "a", Duration: 30 * time.Second, Clock: clk})
	ctx := waitCtx(t)
	r, err := leasetest.Settle(ctx, tr, clk, 1)
	require.NoError(t, err)
	assert.Equal(t, lease.Held, r.State)
	// Half-way through the validity, early by up to a tenth of that.
	assert.WithinRange(t, r.NextCall, t0.Add(28500*time.Millisecond-2850*time.Millisecond), t0.Add(28500*time.Millisecond),
		"renews half-way through the validity")
	for i := range 5 {
		r, err = leasetest.Step(ctx, tr, clk)
		require.NoError(t, err)
		assert.Equal(t, uint64(i+1), r.Calls.Extend.OK)
		assert.Equal(t, lease.Held, r.State)
		assert.True(t, r.NextCall.After(clk.Now()))
	}
	assert.Equal(t, 5, fs.Calls(leasetest.OpExtend))
}

// Settle does not return while a store call is in flight (here one that
// hangs until its timeout on the clock); it says so when ctx ends.
func TestSettleWaitsOutCallInFlight(t *testing.T) {
	clk, _, fs := newStores()
	fs.Next(leasetest.OpClaim, leasetest.Hang)
	tr := newTracker(t, lease.Config{Store: fs, Name: "l", Holder: "a", Duration: 30 * time.Second, Clock: clk})
	require.NoError(t, fs.WaitBlocked(waitCtx(t), 1))
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := leasetest.Settle(short, tr, clk, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "not settled")

	clk.Advance(30 * time.Second / 4) // the call timeout
	r, err := leasetest.Settle(waitCtx(t), tr, clk, 1)
	require.NoError(t, err)
	assert.Equal(t, lease.Unknown, r.State)
	assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{Ambiguous: 1}}, r.Calls)
	assert.Zero(t, r.InCall)
}

func TestSettleClosedTracker(t *testing.T) {
	clk, _, fs := newStores()
	tr := newTracker(t, lease.Config{Store: fs, Name: "l", Holder: "a", Duration: time.Minute, Clock: clk})
	require.NoError(t, tr.Close())
	r, err := leasetest.Settle(waitCtx(t), tr, clk, 100)
	require.NoError(t, err)
	assert.True(t, r.Closed)
	r, err = leasetest.Step(waitCtx(t), tr, clk)
	require.NoError(t, err)
	assert.True(t, r.Closed)
}

// Drive a tracker on a testclock: Settle until it waits for the clock,
// Step through its store calls.
func ExampleStep() {
	clk, _, fs := newStores()
	tr, err := lease.NewTracker(lease.Config{Store: fs, Name: "l", Holder: "a", Duration: 30 * time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	ctx := context.Background()
	fs.Always(leasetest.OpExtend, leasetest.Timeout) // the store stops answering
	for {
		r, err := leasetest.Step(ctx, tr, clk)
		if err != nil {
			panic(err)
		}
		if r.State != lease.Held {
			fmt.Println(r.State, "after", clk.Now().Sub(t0), "with", r.Calls.Extend.OK, "renewals confirmed")
			return
		}
	}
	// Output:
	// unknown after 57s with 0 renewals confirmed
}
