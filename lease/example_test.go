package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

func ExampleTracker_Check() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.NewClock(start)
	store := lease.NewMemStore(clk)
	cfg := lease.Config{Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk}
	leader, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer leader.Close()

	// Is this unit leader for at least 30 s? (The first check waits for
	// the claim.)
	st, err := leader.Check(context.Background(), 30*time.Second)
	fmt.Println(st.State, st.Holder, "token", st.Token, "for", st.Until.Sub(start), err)

	cfg.Holder = "unit-1"
	follower, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer follower.Close()
	st, err = follower.Check(context.Background(), 30*time.Second)
	fmt.Println(st.State, errors.Is(err, lease.ErrNotLeader), err)
	// Output:
	// held unit-0 token 1 for 57s <nil>
	// not-held true lease "singular": not the leader: held by "unit-0"
}

// The incident: a check lands at renewal time while the lease back end
// times out. The answer is "renewal not confirmed, still held for 28 s",
// not "not the leader".
func ExampleTracker_Check_renewalTimeout() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(lease.NewMemStore(clk), clk)
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second,
		Jitter: -1, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Check(ctx, 30*time.Second); err != nil {
		panic(err)
	}

	store.Always(leasetest.OpExtend, leasetest.Timeout)
	clk.Advance(29 * time.Second)
	st, err := tr.Check(ctx, 30*time.Second)
	fmt.Println("state:", st.State)
	fmt.Println("renewal failed:", errors.Is(err, lease.ErrRenewalFailed))
	fmt.Println("not leader:", errors.Is(err, lease.ErrNotLeader))
	fmt.Println("still ours for:", st.Until.Sub(clk.Now()))
	// Output:
	// state: held
	// renewal failed: true
	// not leader: false
	// still ours for: 28s
}

// WithLeadership runs leader work with a ctx that ends when the lease can
// no longer be promised. Here another party ends the term (an operator's
// revoke; on etcd, a deleted key): the store, a LossNotifier, tells the
// tracker at once, the tracker confirms the loss with the store, and ctx
// ends — without waiting for the next scheduled renewal.
func ExampleTracker_WithLeadership() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := lease.NewMemStore(clk)
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()

	err = tr.WithLeadership(context.Background(), func(ctx context.Context) error {
		st, _ := tr.Check(ctx, 0)
		fmt.Println("leading with fencing token", st.Token)

		term := lease.Grant{Name: "singular", Holder: "unit-0", Token: st.Token}
		if err := store.Revoke(context.Background(), term); err != nil {
			return err
		}
		<-ctx.Done()
		fmt.Println("stopped:", errors.Is(context.Cause(ctx), lease.ErrNotLeader))
		return ctx.Err()
	})
	fmt.Println("WithLeadership:", errors.Is(err, lease.ErrNotLeader))
	fmt.Println("clock moved:", clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	// Output:
	// leading with fencing token 1
	// stopped: true
	// WithLeadership: true
	// clock moved: 0s
}
