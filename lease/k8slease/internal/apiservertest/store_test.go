package apiservertest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// clientGoRecord is the Lease as client-go's leaderelection compares it:
// the JSON of its LeaderElectionRecord, renewTime to whole seconds.
func clientGoRecord(t *testing.T, cs kubernetes.Interface, ns, name string) (*coordinationv1.Lease, []byte) {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	raw, err := json.Marshal(resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec))
	require.NoError(t, err)
	return l, raw
}

// TestWritesWhatClientGoReads: the Lease a claim and its renewals write is
// the record client-go's LeaseLock writes, and every renewal — even several
// within one second — changes the record as client-go reads it, so a
// client-go candidate restarts its wait at each one.
func TestWritesWhatClientGoReads(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	clk := testclock.NewClock(time.Now().Truncate(time.Second).Add(100 * time.Millisecond))
	s := newStore(t, cs, ns, k8slease.WithClock(clk))
	ctx := context.Background()
	g, err := s.Claim(ctx, "leader", "a", 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, g.Duration, "whole seconds, rounded up")
	l, prev := clientGoRecord(t, cs, ns, "leader")
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	require.Equal(t, "a", rec.HolderIdentity)
	require.Equal(t, 2, rec.LeaseDurationSeconds)
	require.Equal(t, int(g.Token), rec.LeaderTransitions)
	require.True(t, l.Spec.AcquireTime.Equal(l.Spec.RenewTime), "a new term starts at its first renewTime")
	require.WithinDuration(t, clk.Now(), l.Spec.RenewTime.Time, time.Millisecond, "renewTime is the store's clock")

	for i := range 4 {
		clk.Advance(100 * time.Millisecond) // four renewals within one second of the clock
		g2, err := s.Extend(ctx, g, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, g.Token, g2.Token)
		l2, raw := clientGoRecord(t, cs, ns, "leader")
		require.Falsef(t, bytes.Equal(prev, raw), "renewal %d left the record client-go compares unchanged: %s", i+1, raw)
		require.Equal(t, l.Spec.AcquireTime.Time, l2.Spec.AcquireTime.Time, "acquireTime is the term's start")
		prev = raw
	}
}

// TestTakeoverWaitsForAnUnchangedRecord: a held Lease is taken over only
// once this process has seen its record unchanged for its
// leaseDurationSeconds, on its own clock (a testclock here, while renewTime
// is the holder's wall clock: they are never compared); every renewal
// restarts the wait.
func TestTakeoverWaitsForAnUnchangedRecord(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	holder := newStore(t, cs, ns)
	g, err := holder.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)

	clk := testclock.NewClock(time.Now())
	claimant := newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk))
	requireHeldBy := func(why string) {
		t.Helper()
		_, err := claimant.Claim(ctx, "leader", "b", 2*time.Second)
		var he *leasestore.HeldError
		require.ErrorAs(t, err, &he, why)
		require.Equal(t, "a", he.Holder)
	}
	requireHeldBy("first sight of the record")
	clk.Advance(2*time.Second - time.Millisecond)
	requireHeldBy("unchanged for less than leaseDurationSeconds")
	_, err = holder.Extend(ctx, g, 2*time.Second)
	require.NoError(t, err)
	requireHeldBy("renewed: the wait starts again")
	clk.Advance(2*time.Second - time.Millisecond)
	requireHeldBy("seen unchanged for just under leaseDurationSeconds since the renewal")
	clk.Advance(time.Millisecond)
	b, err := claimant.Claim(ctx, "leader", "b", 2*time.Second)
	require.NoError(t, err, "unchanged for leaseDurationSeconds")
	require.Equal(t, g.Token+1, b.Token)

	_, err = holder.Extend(ctx, g, 2*time.Second)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh, "the old holder's renewal after the takeover")
	require.Equal(t, "b", nh.Holder)
}

// TestClaimTakesAReleasedLease: a Lease client-go released (no holder,
// leaseDurationSeconds 1) is taken at once, with the next token.
func TestClaimTakesAReleasedLease(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	released, none, one, transitions := metav1.NewMicroTime(time.Now()), "", int32(1), int32(7)
	_, err := cs.CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &none, LeaseDurationSeconds: &one,
			AcquireTime: &released, RenewTime: &released, LeaseTransitions: &transitions},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	g, err := newStore(t, cs, ns).Claim(context.Background(), "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(8), g.Token)
}

// TestRevokeReleasesAsClientGoDoes: Revoke leaves the Lease as client-go's
// ReleaseOnCancel does, so a client-go candidate takes it at once.
func TestRevokeReleasesAsClientGoDoes(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	s := newStore(t, cs, ns)
	g, err := s.Claim(context.Background(), "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Revoke(context.Background(), g))
	l, _ := clientGoRecord(t, cs, ns, "leader")
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	require.Equal(t, "", rec.HolderIdentity)
	require.Equal(t, 1, rec.LeaseDurationSeconds)
	require.Equal(t, int(g.Token), rec.LeaderTransitions, "a release is not a transition")
}

// TestConflictInTheSameTermIsRetried: another party's write that leaves
// the term alone (a label, say) makes the next renewal conflict; the store
// re-reads, sees its term, and renews.
func TestConflictInTheSameTermIsRetried(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	s := newStore(t, cs, ns)
	g, err := s.Claim(context.Background(), "leader", "a", 2*time.Second)
	require.NoError(t, err)
	l, _ := clientGoRecord(t, cs, ns, "leader")
	l.Labels = map[string]string{"team": "infra"}
	_, err = cs.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	g2, err := s.Extend(context.Background(), g, 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, g.Token, g2.Token)
	l2, _ := clientGoRecord(t, cs, ns, "leader")
	require.Equal(t, "infra", l2.Labels["team"], "the renewal keeps what others wrote")
}

// TestDeletedLease: deleting the Lease object ends the term, also when
// another process re-creates it and its term has the same holder name and
// token (leaseTransitions restarts: documented); a store that saw the old
// object continues its count when it creates the Lease anew.
func TestDeletedLease(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases(ns)
	s := newStore(t, cs, ns)
	g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, leases.Delete(ctx, "leader", metav1.DeleteOptions{}))
	_, err = s.Extend(ctx, g, 2*time.Second)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh, "Extend of a deleted Lease")
	require.Contains(t, nh.Reason, "does not exist")

	g, err = s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(2), g.Token, "this store saw the old Lease: tokens go on increasing")

	// Another process, which never saw the Lease, re-creates it and
	// reaches the same holder name and token.
	require.NoError(t, leases.Delete(ctx, "leader", metav1.DeleteOptions{}))
	other := newStore(t, newClient(t, ""), ns)
	first, err := other.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first.Token, "a store that never saw the Lease starts at 1")
	require.NoError(t, other.Revoke(ctx, first))
	look, err := other.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, g, look, "the same holder, name and token as the deleted term")
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.ErrorAs(t, err, &nh, "Extend of a term whose Lease was deleted and re-created")
	require.Contains(t, nh.Reason, "re-created")
}

// TestMissingNamespaceIsNotDefinitive: a 404 that is not about the Lease
// (here: its namespace does not exist) says nothing about who holds it.
func TestMissingNamespaceIsNotDefinitive(t *testing.T) {
	s := newStore(t, newClient(t, ""), "no-such-namespace")
	_, err := s.Claim(context.Background(), "leader", "a", 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.NotErrorIs(t, err, leasestore.ErrHeld)
	require.NotErrorIs(t, err, leasestore.ErrNotHeld)
	require.ErrorContains(t, err, "no-such-namespace")
}
