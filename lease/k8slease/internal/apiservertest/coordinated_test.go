package apiservertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// writeSpec changes the Lease name of ns with client-go, as a coordinated
// leader election controller or a person would.
func writeSpec(t *testing.T, cs kubernetes.Interface, ns, name string, change func(*coordinationv1.LeaseSpec)) {
	t.Helper()
	leases := cs.CoordinationV1().Leases(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&l.Spec)
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
}

func readSpec(t *testing.T, cs kubernetes.Interface, ns, name string) coordinationv1.LeaseSpec {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return l.Spec
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestPreferredHolderTakesOver (KEP-4355, coordinated leader election):
// a leads, b and c wait, each running YieldToPreferredHolder. client-go
// writes spec.strategy, which a's renewals keep, then spec.preferredHolder
// "b". a steps down: NotHeld, its Lead function's ctx ends — and the Lease
// stays a's until that function has returned; then a releases, and b, not
// c, leads. strategy and preferredHolder are still as written. The history
// checker finds no two leaders at once.
func TestPreferredHolderTakesOver(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	const strategy = coordinationv1.OldestEmulationVersion
	cfg := func(store leasestore.Store, holder string) lease.Config {
		return lease.Config{Store: store, Name: "leader", Holder: holder, Duration: time.Second}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var rec history.Recorder
	type party struct {
		tr *lease.Tracker
		w  *watcher
	}
	parties := map[string]party{}
	start := func(holder string) party {
		store := newStore(t, newClient(t, ""), ns)
		tr, w := newTracker(t, cfg(store, holder))
		wg.Go(func() {
			err := store.YieldToPreferredHolder(ctx, tr)
			if !errors.Is(err, context.Canceled) && !errors.Is(err, lease.ErrClosed) {
				t.Errorf("%s: YieldToPreferredHolder: %v", holder, err)
			}
		})
		parties[holder] = party{tr, w}
		return parties[holder]
	}
	defer func() {
		for holder, p := range parties {
			p.w.record(&rec, holder)
		}
		for _, v := range rec.Verify() {
			t.Error(v)
		}
	}()

	a := start("a")
	first := a.w.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	// a's leader: when its ctx ends, it drains until the test lets it go.
	stopping, drain := make(chan struct{}), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(drain) })
	defer letGo() // before the wait for a's Lead, should the test end early
	wg.Go(func() {
		a.tr.Lead(ctx, func(lctx context.Context, st lease.Status) error {
			begun := time.Now()
			<-lctx.Done()
			close(stopping)
			<-drain
			rec.Record(history.Answer{Node: "a", Call: history.CallLead, Status: st, Err: context.Cause(lctx), Asked: begun, Returned: time.Now()})
			return nil
		})
	})
	b, c := start("b"), start("c")
	b.w.await(t, 0, 5*time.Second, "b naming a", notHeldNaming("a"))
	c.w.await(t, 0, 5*time.Second, "c naming a", notHeldNaming("a"))

	writeSpec(t, cs, ns, "leader", func(s *coordinationv1.LeaseSpec) { s.Strategy = new(strategy) })
	a.w.await(t, a.w.mark(), 5*time.Second, "a renewed", renewedAfter("a", first.Until))
	require.Equal(t, string(strategy), str((*string)(readSpec(t, cs, ns, "leader").Strategy)), "a's renewal kept spec.strategy")

	mark := a.w.mark()
	writeSpec(t, cs, ns, "leader", func(s *coordinationv1.LeaseSpec) { s.PreferredHolder = new("b") })
	down := a.w.await(t, mark, 5*time.Second, "a stepping down", func(st lease.Status) bool { return st.State == lease.NotHeld })
	select {
	case <-stopping:
	case <-time.After(5 * time.Second):
		t.Fatal("a's Lead function's ctx did not end within 5s of a stepping down")
	}
	spec := readSpec(t, cs, ns, "leader")
	require.Equal(t, "a", str(spec.HolderIdentity), "a released the Lease while its Lead function still ran")

	released := time.Now()
	letGo()
	took := b.w.await(t, 0, 5*time.Second, "b Held", heldBy("b"))
	// a's step-down, as the history checker takes one: asked no earlier
	// than a published NotHeld, released by the time b led.
	rec.Record(history.Answer{Node: "a", Call: history.CallStepDown, Asked: down.at, Returned: took.at})
	t.Logf("b led %v after a's Lead function returned", took.at.Sub(released))
	for _, o := range c.w.since(0) {
		require.NotEqual(t, lease.Held, o.State, "c led, not the preferred holder: %+v", o)
	}
	spec = readSpec(t, cs, ns, "leader")
	require.Equal(t, "b", str(spec.HolderIdentity))
	require.Equal(t, "b", str(spec.PreferredHolder), "preferredHolder as written")
	require.Equal(t, string(strategy), str((*string)(spec.Strategy)), "strategy as written")
}

// TestReleasedLeaseIsReservedForThePreferredHolder: a Lease released with
// a preferredHolder refuses another claimant, naming the preferred holder
// (whose claim succeeds at once), until the record has gone unchanged for
// its leaseDurationSeconds: an absent preferred holder does not leave the
// Lease without one.
func TestReleasedLeaseIsReservedForThePreferredHolder(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	sa := newStore(t, cs, ns)
	g, err := sa.Claim(ctx, "leader", "a", 5*time.Second)
	require.NoError(t, err)
	writeSpec(t, cs, ns, "leader", func(s *coordinationv1.LeaseSpec) {
		s.Strategy, s.PreferredHolder = new(coordinationv1.OldestEmulationVersion), new("b")
	})
	_, err = sa.Extend(ctx, g, 5*time.Second)
	require.NoError(t, err, "a renewal of a's term, which prefers b")
	require.NoError(t, sa.Revoke(ctx, g))

	sc := newStore(t, newClient(t, ""), ns)
	_, err = sc.Claim(ctx, "leader", "c", 5*time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held, "c's claim of a Lease released to b")
	require.Equal(t, "b", held.Holder)
	// c waits on the reservation; it ends when b claims.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	over := sc.WatchRelease(wctx, held)
	sb := newStore(t, newClient(t, ""), ns)
	gb, err := sb.Claim(ctx, "leader", "b", 5*time.Second)
	require.NoError(t, err, "the preferred holder's claim")
	require.Greater(t, gb.Token, g.Token)
	select {
	case err := <-over:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("c's watch of the reservation said nothing after b claimed")
	}

	// Released to b again, and b does not come: c may claim once the
	// release has gone unchanged for its leaseDurationSeconds (1 s) on c's
	// clock.
	require.NoError(t, sb.Revoke(ctx, gb))
	clk := testclock.NewClock(time.Now())
	sc = newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk))
	_, err = sc.Claim(ctx, "leader", "c", 5*time.Second)
	require.ErrorAs(t, err, &held, "c's claim of the Lease released to b")
	require.Equal(t, "b", held.Holder)
	clk.Advance(time.Second)
	gc, err := sc.Claim(ctx, "leader", "c", 5*time.Second)
	require.NoError(t, err, "c's claim once the reservation ran out")
	require.Greater(t, gc.Token, gb.Token)
	spec := readSpec(t, cs, ns, "leader")
	require.Equal(t, "b", str(spec.PreferredHolder), "preferredHolder as written")
	require.Equal(t, string(coordinationv1.OldestEmulationVersion), str((*string)(spec.Strategy)), "strategy as written")
}

// TestAbsentPreferredHolderLeavesNoGap: a, running YieldToPreferredHolder,
// steps down for the preferredHolder b, which never comes. Once the
// release reserved for b has run out, a claims again and keeps that term:
// b had its turn. (Yielding to b again at each claim kept the Lease
// leaderless for as long as preferredHolder named it.)
func TestAbsentPreferredHolderLeavesNoGap(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx, cancel := context.WithCancel(context.Background())
	store := newStore(t, newClient(t, ""), ns)
	a, w := newTracker(t, lease.Config{Store: store, Name: "leader", Holder: "a", Duration: time.Second})
	yielded := make(chan error, 1)
	go func() { yielded <- store.YieldToPreferredHolder(ctx, a) }()
	defer func() {
		cancel()
		require.ErrorIs(t, <-yielded, context.Canceled)
	}()

	first := w.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	mark := w.mark()
	writeSpec(t, cs, ns, "leader", func(s *coordinationv1.LeaseSpec) {
		s.Strategy, s.PreferredHolder = new(coordinationv1.OldestEmulationVersion), new("b")
	})
	w.await(t, mark, 5*time.Second, "a stepping down for b", func(st lease.Status) bool { return st.State == lease.NotHeld })
	mark = w.mark()
	again := w.await(t, mark, 10*time.Second, "a Held again once b's reservation ran out", heldBy("a"))
	require.Greater(t, again.Token, first.Token)
	renewed := w.await(t, mark, 5*time.Second, "a renewed", renewedAfter("a", again.Until))
	w.await(t, mark, 5*time.Second, "a renewed twice", renewedAfter("a", renewed.Until))
	for _, o := range w.since(mark) {
		require.Equal(t, lease.Held, o.State, "a stepped down for b again: %+v", o)
		require.Equal(t, again.Token, o.Token, "one term: %+v", o)
	}
	require.Equal(t, "b", str(readSpec(t, cs, ns, "leader").PreferredHolder), "preferredHolder as written")
}
