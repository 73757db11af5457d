package etcdlease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// The partition property on etcd, for both stores: the leader's process is
// cut off from etcd (its client reaches the member through a proxy that is
// cut). Throughout, at no instant do both trackers answer Held; the cut-off
// leader never says "not leader" while it is cut off (no store ends a term
// while it cannot reach etcd); the other becomes leader once etcd has
// expired the cut-off term (2 × Duration for Store, the session TTL for
// SessionStore). When the partition heals, the old leader learns
// definitively who leads now.
func TestPartitionedLeaderIsSucceededWithoutOverlap(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testPartitionedLeaderIsSucceededWithoutOverlap)
}

func testPartitionedLeaderIsSucceededWithoutOverlap(t *testing.T, kind storeKind) {
	m := etcdtest.Start(t)
	cliB := m.Client()
	toA := m.Link()
	cliA := newClient(t, toA.Endpoints()...)
	const d = time.Second // claims for 2 s
	cfg := func(s leasestore.Store, holder string) lease.Config {
		return lease.Config{Store: s, Name: "singular", Holder: holder, Duration: d, Margin: slowTimer}
	}
	a := newTracker(t, cfg(kind.make(t, cliA, "/partition/", 2*d), "a"))
	nextStatus(t, a, 10*time.Second, isHeld, isNotHeld, "a to lead")
	b := newTracker(t, cfg(kind.make(t, cliB, "/partition/", 2*d), "b"))
	nextStatus(t, b, 10*time.Second, isNotHeld, isHeld, "b to learn a leads")

	ctx := testCtx(t)
	cut := time.Now()
	toA.Refuse()
	var promised time.Time // the latest Until a answered Held with
	for {
		ast, aerr := a.Check(ctx, 0)
		require.False(t, errors.Is(aerr, lease.ErrNotLeader) || ast.State == lease.NotHeld,
			"a said not leader while cut off (its promise ran to %v): %v", promised, aerr)
		if ast.State == lease.Held && ast.Until.After(promised) {
			promised = ast.Until
		}
		bst, _ := b.Check(ctx, 0)
		if bst.State == lease.Held {
			now := time.Now()
			require.False(t, now.Before(promised), "b holds at %v while a's promise runs to %v", now, promised)
			require.NotEqual(t, lease.Held, func() lease.State { st, _ := a.Check(ctx, 0); return st.State }(),
				"a must have given up its promise by the time b leads")
			t.Logf("b leads %v after the cut, %v after a's promise ended",
				now.Sub(cut).Round(time.Millisecond), now.Sub(promised).Round(time.Millisecond))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("b never led after a was cut off")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Healed: a reaches etcd again and is told who leads.
	cliA.SetEndpoints(m.Endpoints()...)
	told := nextStatus(t, a, 15*time.Second,
		func(st lease.Status) bool { return st.State == lease.NotHeld && st.Holder == "b" }, isHeld, "a to learn b leads")
	require.Equal(t, "b", told.Holder)
}
