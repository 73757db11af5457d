package apiservertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// handoverConfig is the tracker of the hand-over tests: the defaults at
// Duration 2 s (the Lease says leaseDurationSeconds 4; a waiting follower
// without a watch claims every ClaimInterval, 200 ms; with one, once a
// term, 4 s).
func handoverConfig(store leasestore.Store, holder string, release bool) lease.Config {
	return lease.Config{Store: store, Name: "leader", Holder: holder, Duration: 2 * time.Second, ReleaseOnClose: release}
}

// renewedAfter accepts a Held status of holder promising more than until.
func renewedAfter(holder string, until time.Time) func(lease.Status) bool {
	return func(st lease.Status) bool {
		return st.State == lease.Held && st.Holder == holder && st.Until.After(until)
	}
}

// TestReleaseWakesTheWaitingFollower: a follower refused a claim waits on
// the Lease's watch — no claim while the leader renews — and leads within
// a moment of the leader's release, long before its next claim (one term
// later) or a poll would have come.
func TestReleaseWakesTheWaitingFollower(t *testing.T) {
	csA, csB := newClient(t, ""), newClient(t, "")
	ns := newNamespace(t, csA)
	a, wa := newTracker(t, handoverConfig(newStore(t, csA, ns), "a", true))
	first := wa.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	b, wb := newTracker(t, handoverConfig(newStore(t, csB, ns), "b", false))
	wb.await(t, 0, 5*time.Second, "b naming a", notHeldNaming("a"))

	// a renews (~2 s: ten of b's claim intervals); b does not claim.
	wa.await(t, wa.mark(), 5*time.Second, "a renewed", renewedAfter("a", first.Until))
	require.Equal(t, uint64(1), b.Report().Denials, "b claimed while a renewed: it polls instead of watching")

	released := time.Now()
	require.NoError(t, a.Close())
	took := wb.await(t, wb.mark(), 10*time.Second, "b Held", heldBy("b"))
	gap := took.at.Sub(released)
	t.Logf("b led %v after a began its release", gap)
	require.Greater(t, took.Token, first.Token)
	// A failure bound: b's next claim without the watch's word would come
	// a term (4 s) after its first.
	require.Less(t, gap, time.Second, "the release did not wake b")
	r := b.Report()
	require.Equal(t, uint64(1), r.Denials, "b's claims: %+v", r.Calls.Claim)
	require.Equal(t, uint64(1), r.Calls.Claim.OK)
}

// TestCrashedHoldersFollowerWakesAtTheEndOfItsTerm: a leader stops
// without releasing; its follower, waiting on the watch, leads once the
// record has gone unchanged for its leaseDurationSeconds — after the old
// promise, and without polling meanwhile.
func TestCrashedHoldersFollowerWakesAtTheEndOfItsTerm(t *testing.T) {
	csA, csB := newClient(t, ""), newClient(t, "")
	ns := newNamespace(t, csA)
	a, wa := newTracker(t, handoverConfig(newStore(t, csA, ns), "a", false))
	first := wa.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	b, wb := newTracker(t, handoverConfig(newStore(t, csB, ns), "b", false))
	wb.await(t, 0, 5*time.Second, "b naming a", notHeldNaming("a"))
	wa.await(t, wa.mark(), 5*time.Second, "a renewed", renewedAfter("a", first.Until))

	stopped := time.Now()
	require.NoError(t, a.Close())
	promised := wa.lastUntil(0)
	took := wb.await(t, wb.mark(), 4*time.Second+5*time.Second, "b Held", heldBy("b"))
	t.Logf("b led %v after a stopped (a's promise ended %v after it stopped)", took.at.Sub(stopped), promised.Sub(stopped))
	require.False(t, took.at.Before(promised), "b led from %v, before a's promise ended at %v", took.at, promised)
	require.Less(t, took.at.Sub(stopped), 4*time.Second+time.Second, "a failure bound: leaseDurationSeconds and a claim")
	// Its first refusal, and at most one fallback claim a term later:
	// polling every ClaimInterval would be ~30.
	r := b.Report()
	require.LessOrEqual(t, r.Denials, uint64(2), "b polled while a's term ran out: %+v", r.Calls.Claim)
}

// TestReleaseWatchRestartIsNotARelease: the follower's connections are
// dropped three times while the holder renews; each time its watch ends,
// and the Store reads the Lease again and watches on. The watch says
// "over" only once the holder releases, never for the live term.
func TestReleaseWatchRestartIsNotARelease(t *testing.T) {
	p := newProxy(t)
	csA, csB := newClient(t, ""), newClient(t, p.addr())
	ns := newNamespace(t, csA)
	ctx := context.Background()
	sa, sb := newStore(t, csA, ns), newStore(t, csB, ns)
	// leaseDurationSeconds 30: no term runs out in this test, so only
	// the watch can say anything.
	g, err := sa.Claim(ctx, "leader", "a", 30*time.Second)
	require.NoError(t, err)
	_, err = sb.Claim(ctx, "leader", "b", 30*time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, leasestore.HeldError{Name: "leader", Holder: "a", Token: g.Token}, *held, "the refusal names the term")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := sb.WatchRelease(wctx, held)
	type answer struct {
		err error
		at  time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		err := <-ch
		answered <- answer{err, time.Now()}
	}()
	for range 3 {
		reconnected := p.nextConn()
		p.drop()
		select {
		case <-reconnected: // the Store read the Lease again
		case a := <-answered:
			t.Fatalf("the watch answered %v when its connection dropped, for a live term", a.err)
		case <-time.After(10 * time.Second):
			t.Fatal("the Store did not reconnect within 10s of its connection's drop")
		}
		g, err = sa.Extend(ctx, g, 30*time.Second)
		require.NoError(t, err)
	}
	revoked := time.Now()
	require.NoError(t, sa.Revoke(ctx, g))
	select {
	case a := <-answered:
		require.NoError(t, a.err)
		require.False(t, a.at.Before(revoked), "the watch said the term was over before it was released")
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not report the release within 10s")
	}
	_, ok := <-ch
	require.False(t, ok, "the channel closes after its one answer")
}

// TestReleaseWatchThatCannotBeKeptSaysSo: the follower's API server goes
// away; its watch ends with an ambiguous error (the tracker then polls),
// not silence and not "over".
func TestReleaseWatchThatCannotBeKeptSaysSo(t *testing.T) {
	p := newProxy(t)
	csA, csB := newClient(t, ""), newClient(t, p.addr())
	ns := newNamespace(t, csA)
	ctx := context.Background()
	_, err := newStore(t, csA, ns).Claim(ctx, "leader", "a", 30*time.Second)
	require.NoError(t, err)
	sb := newStore(t, csB, ns)
	_, err = sb.Claim(ctx, "leader", "b", 30*time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := sb.WatchRelease(wctx, held)
	p.set(cut)
	select {
	case err := <-ch:
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "the watch of a Lease it cannot reach: %v", err)
		var ce *leasestore.CallError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, leasestore.OpWatchRelease, ce.Op)
		t.Logf("the watch ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch said nothing within 20s of its API server going away")
	}
}

var _ leasestore.ReleaseWatcher = (*k8slease.Store)(nil)
