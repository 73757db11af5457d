package leasetest

import (
	"context"
	"fmt"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Settle waits until tr, running on clk, has settled: it has finished at
// least minCalls store calls (all of lease.Report.Calls; 0 for any) and its
// renewer waits for the clock — no store call in flight or asked for, the
// next one scheduled at Report.NextCall, after clk.Now(). Nothing more
// happens in tr until clk moves, a check or StepDown asks for a call, or a
// LossNotifier or ReleaseWatcher signals (a follower woken by a release
// then schedules its claim a few ms ahead: settle it again). A closed
// tracker has settled. It returns tr's Report then, or an error wrapping
// ctx.Err() if ctx ends first: a store call blocked on clk (FaultStore
// latency, a Hang) keeps tr from settling, and so does a renewer waiting
// for Lead functions to return before it releases the lease (StepDown, or
// Close with ReleaseOnClose) until they return or clk reaches their Until.
// Settle reads clk.Alarms(), with no sleeps: do not read it elsewhere
// while Settle runs.
func Settle(ctx context.Context, tr *lease.Tracker, clk *testclock.Clock, minCalls uint64) (lease.Report, error) {
	for {
		r := tr.Report()
		if r.Closed || finished(r) >= minCalls && !r.NextCall.IsZero() && r.NextCall.After(clk.Now()) {
			return r, nil
		}
		select {
		case <-clk.Alarms():
		case <-ctx.Done():
			return r, fmt.Errorf("leasetest: tracker %q not settled: %s: %w", r.Name, unsettled(r, minCalls), ctx.Err())
		}
	}
}

// Step settles tr, advances clk to the renewer's next store call, and
// settles tr again once that call is done. It returns the Report then:
// tr driven through one renewal, retry or claim with no sleeps. Step does
// not move clk for store calls that wait on it (FaultStore latency).
func Step(ctx context.Context, tr *lease.Tracker, clk *testclock.Clock) (lease.Report, error) {
	r, err := Settle(ctx, tr, clk, 0)
	if err != nil || r.Closed {
		return r, err
	}
	clk.Advance(r.NextCall.Sub(clk.Now()))
	return Settle(ctx, tr, clk, finished(r)+1)
}

// unsettled says why r, a Report of a tracker that has not settled, is not.
func unsettled(r lease.Report, minCalls uint64) string {
	switch {
	case finished(r) < minCalls:
		return fmt.Sprintf("%d of %d store calls finished (state %v)", finished(r), minCalls, r.State)
	case r.InCall > 0:
		return fmt.Sprintf("a store call in flight for %v (state %v)", r.InCall, r.State)
	}
	return fmt.Sprintf("state %v, %d store calls finished, no call scheduled: "+
		"a store call just started or asked for, or the renewer waits for Lead functions to return before it releases the lease",
		r.State, finished(r))
}

// finished is the store calls r's tracker has finished, whatever their
// answer.
func finished(r lease.Report) uint64 {
	var n uint64
	for _, c := range []leasestore.Calls{r.Calls.Claim, r.Calls.Extend, r.Calls.Revoke} {
		n += c.OK + c.Definitive + c.NotSent + c.Ambiguous
	}
	return n
}
