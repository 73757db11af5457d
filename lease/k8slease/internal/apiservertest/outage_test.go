package apiservertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
)

// TestOutage: the leader reaches the API server through a proxy that first
// stalls (a slow API server) and then cuts every connection (an API server
// down); the follower reaches it directly. The leader answers Held or
// ErrRenewalFailed throughout, never ErrNotLeader; the follower takes over
// only after the leader's promise ended; once the proxy heals, the old
// leader learns who leads.
func TestOutage(t *testing.T) {
	p := newProxy(t)
	csA, csB := newClient(t, p.addr()), newClient(t, "")
	ns := newNamespace(t, csB)
	a, wa := newTracker(t, trackerConfig(newStore(t, csA, ns), "leader", "a"))
	wa.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	b, wb := newTracker(t, trackerConfig(newStore(t, csB, ns), "leader", "b"))
	wb.await(t, 0, 5*time.Second, "b naming a", notHeldNaming("a"))
	cfg := trackerConfig(nil, "", "")
	maxPromise := 2*cfg.Duration - cfg.Duration/10 // 2×Duration − Margin

	// Slow: a check that needs a renewal times out; the lease is still a's.
	p.set(stalled)
	markA, markB := wa.mark(), wb.mark()
	st, err := a.Check(checkCtx(t), maxPromise)
	require.ErrorIs(t, err, lease.ErrRenewalFailed, "a check needing a renewal while the API server stalls")
	require.NotErrorIs(t, err, lease.ErrNotLeader)
	require.Equal(t, lease.Held, st.State, "the promise still stands: %+v", st)
	var ambiguous *k8slease.OpError
	require.ErrorAs(t, err, &ambiguous, "the cause is the store's ambiguous error")
	p.set(forwarding)
	renewed := wa.await(t, markA, 5*time.Second, "a renewed after the stall", func(s lease.Status) bool {
		return s.State == lease.Held && s.Until.After(st.Until)
	})
	require.Equal(t, st.Token, renewed.Token, "the same term goes on")
	requireNeverNotHeld(t, wa.since(markA))
	for _, o := range wb.since(markB) {
		require.NotEqual(t, lease.Held, o.State, "b led while a's renewals were only slow: %+v", o)
	}

	// Down: a cannot reach the API server at all; b takes over once a's
	// promise has ended.
	markA = wa.mark()
	p.set(cut)
	took := wb.await(t, wb.mark(), leaseDuration+3*time.Second, "b Held", heldBy("b"))
	promised := wa.lastUntil(0)
	require.False(t, took.at.Before(promised), "b led from %v, before a's promise ended at %v", took.at, promised)
	st, err = a.Check(checkCtx(t), 0)
	require.ErrorIs(t, err, lease.ErrRenewalFailed, "a, cut off, cannot know that b leads")
	require.NotErrorIs(t, err, lease.ErrNotLeader)
	require.Equal(t, lease.Unknown, st.State)
	requireNeverNotHeld(t, wa.since(markA))

	// Healed: a's next renewal finds b's term and names b.
	p.set(forwarding)
	wa.await(t, wa.mark(), 5*time.Second, "a naming b", notHeldNaming("b"))
	_, err = a.Check(checkCtx(t), 0)
	nl, ok := errorsAsNotLeader(err)
	require.True(t, ok, "a after the outage: %v", err)
	require.Equal(t, "b", nl.Holder)
	_, err = b.Check(checkCtx(t), 0)
	require.NoError(t, err, "b leads")
}

// requireNeverNotHeld fails if a tracker cut off from the API server ever
// said "not the leader".
func requireNeverNotHeld(t *testing.T, log []observed) {
	t.Helper()
	for _, o := range log {
		if o.State == lease.NotHeld {
			t.Fatalf("the tracker said NotHeld while the API server was unreachable or slow: %+v", o)
		}
	}
}
