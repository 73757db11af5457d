package apiservertest

// What the store tells: StoreReport's counts and WithLogger's records,
// against the real API server.

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// TestStoreReportCountsEachCallOnce: every call of Claim, Extend and
// Revoke is counted once when it returns, in the class of its answer —
// however many API requests it made (a conflict re-read and retried) —
// and a call stuck in a stalled API server counts in flight, then
// ambiguous once its ctx ends.
func TestStoreReportCountsEachCallOnce(t *testing.T) {
	p := newProxy(t)
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	s := newStore(t, newClient(t, p.addr()), ns)
	require.Equal(t, leasestore.Report{}, s.StoreReport(), "nothing yet")
	ctx := context.Background()

	g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "leader", "b", 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.NoError(t, err)
	// Another party's write within our term: the next renewal conflicts,
	// re-reads and updates again — one call.
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, "leader", metav1.GetOptions{})
	require.NoError(t, err)
	l.Labels = map[string]string{"team": "infra"}
	_, err = cs.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Revoke(ctx, g))
	require.ErrorIs(t, s.Revoke(ctx, g), leasestore.ErrNotHeld)
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	g, err = s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err, "a released Lease is taken at once")

	// The API server stalls: a renewal hangs in the proxy until its ctx
	// ends.
	p.set(stalled)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Extend(short, g, 2*time.Second)
		errc <- err
	}()
	select {
	case <-p.held():
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal never reached the proxy")
	}
	require.Equal(t, 1, s.StoreReport().InFlight, "the renewal the proxy holds")
	require.ErrorIs(t, <-errc, leasestore.ErrUnconfirmed)

	require.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 2, Definitive: 1},
		Extend: leasestore.Calls{OK: 2, Definitive: 1, Ambiguous: 1},
		Revoke: leasestore.Calls{OK: 1, Definitive: 1},
	}, s.StoreReport())
}

// TestStoreLogsATakeoverOnce: a claim that takes over a Lease whose
// record went unchanged for its leaseDurationSeconds is logged, once; the
// claims it denied before, and taking a released Lease, are not.
func TestStoreLogsATakeoverOnce(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	g, err := newStore(t, cs, ns).Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)

	clk := testclock.NewClock(time.Now())
	logs := logtest.New()
	claimant := newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk), k8slease.WithLogger(logs.Logger()))
	for range 3 {
		_, err = claimant.Claim(ctx, "leader", "b", 2*time.Second)
		require.ErrorIs(t, err, leasestore.ErrHeld)
	}
	clk.Advance(2 * time.Second)
	b, err := claimant.Claim(ctx, "leader", "b", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, g.Token+1, b.Token)

	recs := logs.Records()
	require.Len(t, recs, 1, "%v", recs)
	r := recs[0]
	require.Equal(t, "k8s lease taken over", r.Message)
	require.Equal(t, slog.LevelInfo, r.Level)
	require.Equal(t, ns, r.Str("namespace"))
	require.Equal(t, "leader", r.Str("lease"))
	require.Equal(t, "b", r.Str("holder"))
	require.Equal(t, b.Token, r.Uint64(t, "token"))
	require.Equal(t, "a", r.Str("previous"))
	require.Equal(t, (2 * time.Second).String(), r.Str("unchanged"))

	require.NoError(t, claimant.Revoke(ctx, b))
	_, err = claimant.Claim(ctx, "leader", "b", 2*time.Second)
	require.NoError(t, err)
	require.Len(t, logs.Records(), 1, "a release and a claim of the released Lease are no takeover")
}

// TestStoreLogsADeletedLeaseOnce: a tracker renews through a store with a
// logger, which logs nothing per renewal; someone deletes the Lease; the
// store logs it once, the tracker claims the Lease anew (the store
// creates it, continuing the count) and renews on, and nothing more is
// logged.
func TestStoreLogsADeletedLeaseOnce(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	logs := logtest.New()
	s := newStore(t, cs, ns, k8slease.WithLogger(logs.Logger()))
	_, w := newTracker(t, lease.Config{Store: s, Name: "leader", Holder: "a", Duration: 500 * time.Millisecond})
	// renewed waits for the renewal after prev: the same term, a later
	// Until.
	renewed := func(prev observed) observed {
		t.Helper()
		return w.await(t, 0, 5*time.Second, "a renewal", func(st lease.Status) bool {
			return st.State == lease.Held && st.Token == prev.Token && st.Until.After(prev.Until)
		})
	}
	first := w.await(t, 0, 5*time.Second, "a Held", heldBy("a"))
	renewed(renewed(first))
	require.Empty(t, logs.Records(), "renewals log nothing")

	require.NoError(t, cs.CoordinationV1().Leases(ns).Delete(context.Background(), "leader", metav1.DeleteOptions{}))
	mark := w.mark()
	r := logs.WaitMessage(t, "k8s lease deleted", 1)[0]
	require.Equal(t, slog.LevelWarn, r.Level)
	require.Equal(t, ns, r.Str("namespace"))
	require.Equal(t, "leader", r.Str("lease"))
	require.Equal(t, "a", r.Str("holder"))
	require.Equal(t, first.Token, r.Uint64(t, "token"))
	again := w.await(t, mark, 5*time.Second, "a Held again", func(st lease.Status) bool { return st.State == lease.Held && st.Token > first.Token })
	require.Equal(t, first.Token+1, again.Token, "the store continued the count")
	renewed(renewed(again))
	require.Len(t, logs.Records(), 1, "one record for the deletion: %v", logs.Records())
}

// TestStoreLogsARecreatedLease: the Lease a store held is deleted and
// created again by another process (leaseTransitions restarts); the
// store's next renewal finds the new object and logs it as re-created —
// not as a term ended by another writer — once.
func TestStoreLogsARecreatedLease(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	logs := logtest.New()
	s := newStore(t, cs, ns, k8slease.WithLogger(logs.Logger()))
	g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, cs.CoordinationV1().Leases(ns).Delete(ctx, "leader", metav1.DeleteOptions{}))
	b, err := newStore(t, newClient(t, ""), ns).Claim(ctx, "leader", "b", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Token, "a store that never saw the Lease starts at 1")

	for range 2 {
		_, err = s.Extend(ctx, g, 2*time.Second)
		require.ErrorIs(t, err, leasestore.ErrNotHeld)
	}
	recs := logs.Records()
	require.Len(t, recs, 1, "%v", recs)
	r := recs[0]
	require.Equal(t, "k8s lease re-created", r.Message)
	require.Equal(t, slog.LevelWarn, r.Level)
	require.Equal(t, ns, r.Str("namespace"))
	require.Equal(t, "leader", r.Str("lease"))
	require.Equal(t, "b", r.Str("holder"))
	require.Equal(t, b.Token, r.Uint64(t, "token"))
	require.Equal(t, g.Token, r.Uint64(t, "previous_token"))
}

// TestStoreLogsATermEndedByAnotherWriter: another process takes the Lease
// over while this store's holder is silent; the holder's next renewal
// conflicts, re-reads, finds the other holder's term, and the store logs
// that once — the renewal and the release after it log nothing more.
func TestStoreLogsATermEndedByAnotherWriter(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx := context.Background()
	logs := logtest.New()
	s := newStore(t, cs, ns, k8slease.WithLogger(logs.Logger()))
	g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)

	clk := testclock.NewClock(time.Now())
	other := newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk))
	_, err = other.Claim(ctx, "leader", "b", 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	clk.Advance(2 * time.Second)
	b, err := other.Claim(ctx, "leader", "b", 2*time.Second)
	require.NoError(t, err)

	_, err = s.Extend(ctx, g, 2*time.Second)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Equal(t, "b", nh.Holder)
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	require.ErrorIs(t, s.Revoke(ctx, g), leasestore.ErrNotHeld)

	recs := logs.Records()
	require.Len(t, recs, 1, "%v", recs)
	r := recs[0]
	require.Equal(t, "k8s lease term ended by another writer", r.Message)
	require.Equal(t, slog.LevelWarn, r.Level)
	require.Equal(t, ns, r.Str("namespace"))
	require.Equal(t, "leader", r.Str("lease"))
	require.Equal(t, "extend", r.Str("op"))
	require.Equal(t, "b", r.Str("holder"))
	require.Equal(t, g.Token, r.Uint64(t, "token"))
	require.Contains(t, r.Str("err"), "term 2", "the err names the term now: %v", r.Str("err"))
	require.Equal(t, uint64(2), b.Token)
}
