package apiservertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// TestOutage: the leader reaches the API server through a proxy that first
// stalls (a slow API server) and then cuts every connection (an API server
// down); the follower reaches it directly. The leader answers Held or
// ErrRenewalFailed throughout, never ErrNotLeader; once the proxy heals,
// the old leader learns who leads. The history checker
// (leasetest/history) judges every status and answer both trackers gave:
// the follower took over only after the leader's promise ended, and
// nobody was told ErrNotLeader while its promise stood. Through it all the leader stays alive (Alive
// nil: the liveness promise — a slow API server must not restart the
// operator, as client-go's health adaptor does once a renewal is late),
// and its store's StoreReport agrees with the tracker's Report.
func TestOutage(t *testing.T) {
	p := newProxy(t)
	csA, csB := newClient(t, p.addr()), newClient(t, "")
	ns := newNamespace(t, csB)
	storeA := newStore(t, csA, ns)
	a, wa := newTracker(t, trackerConfig(storeA, "leader", "a"))
	wa.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	b, wb := newTracker(t, trackerConfig(newStore(t, csB, ns), "leader", "b"))
	wb.await(t, 0, 5*time.Second, "b naming a", notHeldNaming("a"))
	var rec history.Recorder
	defer func() {
		wa.record(&rec, "a")
		wb.record(&rec, "b")
		for _, v := range rec.Verify() {
			t.Error(v)
		}
	}()
	cfg := trackerConfig(nil, "", "")
	maxPromise := 2*cfg.Duration - cfg.Duration/10 // 2×Duration − Margin
	callTimeout := cfg.Duration / 4                // the default

	// Slow: a check that needs a renewal times out; the lease is still a's.
	// (A renewal first, so that the whole promise lies ahead of the stall.)
	_, err := checked(checkCtx(t), &rec, "a", a, maxPromise-200*time.Millisecond)
	require.NoError(t, err)
	p.set(stalled)
	before := a.Report()
	// The stall outlasts twice the call timeout — what Alive calls stuck —
	// and the tracker stays alive throughout: each call is cut at it
	// and retried.
	alive := sampleAlive(a, 3*callTimeout)
	markA, markB := wa.mark(), wb.mark()
	st, err := checked(checkCtx(t), &rec, "a", a, maxPromise)
	require.NoError(t, <-alive, "Alive while the API server stalls")
	require.ErrorIs(t, err, lease.ErrRenewalFailed, "a check needing a renewal while the API server stalls")
	require.NotErrorIs(t, err, lease.ErrNotLeader)
	require.Equal(t, lease.Held, st.State, "the promise still stands: %+v", st)
	var ambiguous *leasestore.CallError
	require.ErrorAs(t, err, &ambiguous, "the cause is the store's ambiguous error")
	require.GreaterOrEqual(t, a.Report().Calls.Extend.Ambiguous-before.Calls.Extend.Ambiguous, uint64(2), "renewals cut off and retried through the stall")
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
	wb.await(t, wb.mark(), leaseDuration+3*time.Second, "b Held", heldBy("b"))
	st, err = checked(checkCtx(t), &rec, "a", a, 0)
	require.ErrorIs(t, err, lease.ErrRenewalFailed, "a, cut off, cannot know that b leads")
	require.NotErrorIs(t, err, lease.ErrNotLeader)
	require.Equal(t, lease.Unknown, st.State)
	require.NoError(t, a.Alive(), "Alive while the API server is down")
	requireNeverNotHeld(t, wa.since(markA))

	// Healed: a's next renewal finds b's term and names b.
	p.set(forwarding)
	wa.await(t, wa.mark(), 5*time.Second, "a naming b", notHeldNaming("b"))
	_, err = checked(checkCtx(t), &rec, "a", a, 0)
	nl, ok := errorsAsNotLeader(err)
	require.True(t, ok, "a after the outage: %v", err)
	require.Equal(t, "b", nl.Holder)
	_, err = checked(checkCtx(t), &rec, "b", b, 0)
	require.NoError(t, err, "b leads")

	// Every call the tracker made, the store counted alike.
	require.NoError(t, a.Close())
	tr, sr := a.Report(), storeA.StoreReport()
	require.Zero(t, sr.InFlight)
	require.Equal(t, sr, tr.Calls, "the tracker counts its calls as its store does")
	require.Equal(t, tr.Losses, sr.Extend.Definitive)
	require.GreaterOrEqual(t, sr.Extend.Ambiguous+sr.Claim.Ambiguous, uint64(3), "the stall's and the cut's calls: %+v", sr)
	require.Equal(t, uint64(1), sr.Extend.Definitive, "the renewal that found b's term: %+v", sr)
	require.Zero(t, sr.Claim.NotSent+sr.Extend.NotSent+sr.Revoke.NotSent)
}

// sampleAlive asks tr.Alive every 20 ms for period, and then sends the
// first error it returned, or nil.
func sampleAlive(tr *lease.Tracker, period time.Duration) <-chan error {
	out := make(chan error, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		end := time.Now().Add(period)
		for {
			err := tr.Alive()
			if err != nil || time.Now().After(end) {
				out <- err
				return
			}
			<-tick.C
		}
	}()
	return out
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
