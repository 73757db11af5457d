package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// faultReport is what the leader's checks answered during its store fault.
type faultReport struct {
	ran                     bool // false with -fault 0, or when the fault could not start
	held, failed, notLeader int  // checks answered Held, ErrRenewalFailed, ErrNotLeader
	firstNotLeader          error
	before, after           lease.Status // the leader's term before and after the fault
	problems                []string     // a check that failed otherwise, a setup failure
}

// firstLeader returns the controller whose first definitive lease status
// was Held, or nil.
func firstLeader(ctrls []*controller) *controller {
	for _, c := range ctrls {
		c.mu.Lock()
		held := c.status.State == lease.Held
		c.mu.Unlock()
		if held {
			return c
		}
	}
	return nil
}

// leaseFault makes the leader's lease store time out for o.fault while the
// leader keeps checking "am I leader for at least the lease term?". Every
// answer must be Held or ErrRenewalFailed — never ErrNotLeader — and once
// the store recovers the leader must hold the same term (same token).
func leaseFault(ctx context.Context, o options, tl *timeline, leader *controller) faultReport {
	var r faultReport
	if leader == nil || o.fault == 0 {
		return r
	}
	var end time.Time
	var err error
	if r.before, end, err = startFault(ctx, o, tl, leader); err != nil {
		r.problems = append(r.problems, fmt.Sprintf("leader %s: %v", leader.name, err))
		return r
	}
	r.ran = true
	checkDuringFault(ctx, o, tl, leader, end, &r)
	leader.faults.Always(leasetest.OpExtend, leasetest.Pass)
	r.after, err = leader.tracker.Check(ctx, o.leaseTerm)
	switch {
	case err != nil:
		r.problems = append(r.problems, fmt.Sprintf("leader %s after the fault: %v", leader.name, err))
	case r.after.Token == r.before.Token:
		tl.log(leader.name, "store recovered: lease held, same term (token %d); checks during the fault: %d held from cache, %d renewal-failed, %d not-leader",
			r.after.Token, r.held, r.failed, r.notLeader)
	}
	return r
}

// startFault gets a freshly renewed promise and makes every extend time
// out; it returns the promise and when the fault must end.
//
// Started just after a renewal, the store holds the term for 2×lease from
// then, and a fault shorter than that (parseFlags keeps it under 1.7×lease)
// can be outlived. Started at a random phase of the renewal cycle, an 800ms
// fault outlived a 500ms-old renewal and the leader lost its term: a broken
// scenario, not a broken tracker. A check for 1.7×lease is answered from a
// renewal at most 0.2×lease old, or makes the tracker renew at once (its
// longest promise is 1.9×lease: 2×lease less the margin).
func startFault(ctx context.Context, o options, tl *timeline, leader *controller) (before lease.Status, end time.Time, err error) {
	if before, err = leader.tracker.Check(ctx, o.leaseTerm*17/10); err != nil {
		return before, end, fmt.Errorf("renewing before the fault: %w", err)
	}
	// The store holds the term until about before.Until + margin (2×lease
	// after the renewal was sent). End the fault by before.Until − 0.6×lease
	// at the latest, so that the first extend after it still finds the
	// term even if this goroutine runs 0.7×lease late (a loaded machine).
	end = time.Now().Add(o.fault)
	if latest := before.Until.Add(-o.leaseTerm * 6 / 10); latest.Before(end) {
		end = latest
	}
	leader.faults.Always(leasetest.OpExtend, leasetest.Timeout)
	tl.log(leader.name, "FAULT: lease store times out every extend for %v", time.Until(end).Round(time.Millisecond))
	return before, end, nil
}

// checkDuringFault checks the leader's lease every lease/10 until end,
// and once more at or after end.
//
// That last check is what makes the ErrRenewalFailed answer certain, however
// late this goroutine runs: the fault lasts at least 1.2×lease from just
// after the renewal (parseFlags), or until 0.6×lease before the promise
// ends, so at end the cached promise covers less than the lease term the
// check asks for, and the check must renew through the faulty store.
func checkDuringFault(ctx context.Context, o options, tl *timeline, leader *controller, end time.Time, r *faultReport) {
	for ctx.Err() == nil {
		st, err := leader.tracker.Check(ctx, o.leaseTerm)
		switch {
		case errors.Is(err, lease.ErrNotLeader):
			if r.notLeader++; r.notLeader == 1 {
				r.firstNotLeader = err
			}
		case errors.Is(err, lease.ErrRenewalFailed):
			if r.failed++; r.failed == 1 {
				cause := err
				var rf *lease.RenewalFailedError
				if errors.As(err, &rf) {
					cause = rf.Err
				}
				tl.log(leader.name, "check during the fault: ErrRenewalFailed (%v), state %s until +%v, token %d: not \"not leader\"",
					cause, st.State, time.Until(st.Until).Round(time.Millisecond), st.Token)
			}
		case err == nil:
			r.held++
		default:
			r.problems = append(r.problems, fmt.Sprintf("leader %s: check during the fault: %v", leader.name, err))
		}
		if !time.Now().Before(end) {
			return
		}
		select {
		case <-time.After(min(o.leaseTerm/10, time.Until(end))):
		case <-ctx.Done():
		}
	}
}
