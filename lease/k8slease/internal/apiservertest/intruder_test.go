package apiservertest

// What another party's write to the Lease object does to a held term
// (issue 31; DESIGN.md "Round 5: what holds when someone else writes"): a
// held term is ours only while the record names us with our token, as this
// store wrote it. A record rewritten behind the store's back ends the
// promise — the next renewal says NotHeld, with the reason — and never
// stays Held; a write the API server refuses, or one that leaves the term
// alone (a label, the preferred holder), changes nothing.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// intruderStart is the leaseTransitions of the Lease before the store's
// claim: its term is intruderStart+1, so a count written down stays
// positive.
const intruderStart = 10

// intrusion is one write another party makes to the Lease of a held term,
// and what it must do to the term.
type intrusion struct {
	name string
	// write makes the intruder's write over l, the Lease as read, and
	// returns the API server's answer.
	write func(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease) error
	// refused: the API server refuses the write (its validation), so the
	// term goes on; kept: the write leaves the term alone, which goes on.
	refused, kept bool
	// Otherwise the term is over: the NotHeldError names holder now and
	// its Reason contains reason.
	holder, reason string
}

// spec is an intrusion that changes the Lease's spec with an update.
func spec(change func(*coordinationv1.LeaseSpec)) func(context.Context, coordinationv1client.LeaseInterface, *coordinationv1.Lease) error {
	return func(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease) error {
		change(&l.Spec)
		_, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
}

func micro(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

var intrusions = []intrusion{
	{name: "HolderRewritten", write: spec(func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = new("intruder") }),
		holder: "intruder", reason: "the Lease is in term 11"},
	{name: "HolderCleared", write: spec(func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = new("") }),
		reason: "released (leaseTransitions 11)"},
	{name: "TransitionsUp", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseTransitions = new(int32(16)) }),
		holder: "a", reason: "the Lease is in term 16"},
	{name: "TransitionsDown", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseTransitions = new(int32(3)) }),
		holder: "a", reason: "the Lease is in term 3"},
	{name: "TransitionsRemoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseTransitions = nil }),
		holder: "a", reason: "the Lease is in term 0"},
	{name: "TransitionsNegative", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseTransitions = new(int32(-1)) }),
		refused: true},
	{name: "DurationShorter", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseDurationSeconds = new(int32(1)) }),
		holder: "a", reason: "rewritten by another writer: leaseDurationSeconds 1 (this store wrote 2)"},
	{name: "DurationLonger", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseDurationSeconds = new(int32(3600)) }),
		holder: "a", reason: "rewritten by another writer: leaseDurationSeconds 3600 (this store wrote 2)"},
	{name: "DurationRemoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseDurationSeconds = nil }),
		holder: "a", reason: "rewritten by another writer: leaseDurationSeconds none (this store wrote 2)"},
	{name: "DurationZero", write: spec(func(s *coordinationv1.LeaseSpec) { s.LeaseDurationSeconds = new(int32(0)) }),
		refused: true},
	{name: "RenewTimeMoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.RenewTime = micro(s.RenewTime.Add(time.Second)) }),
		holder: "a", reason: "rewritten by another writer: renewTime"},
	{name: "RenewTimeRemoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.RenewTime = nil }),
		holder: "a", reason: "rewritten by another writer: renewTime none"},
	{name: "AcquireTimeMoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.AcquireTime = micro(s.AcquireTime.Add(-time.Hour)) }),
		holder: "a", reason: "rewritten by another writer: acquireTime"},
	{name: "AcquireTimeRemoved", write: spec(func(s *coordinationv1.LeaseSpec) { s.AcquireTime = nil }),
		holder: "a", reason: "rewritten by another writer: acquireTime none"},
	{name: "Deleted", write: func(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease) error {
		return leases.Delete(ctx, l.Name, metav1.DeleteOptions{})
	}, reason: "does not exist (deleted)"},
	{name: "DeletedAndRecreatedAsItWas", write: func(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease) error {
		if err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name}, Spec: l.Spec}, metav1.CreateOptions{})
		return err
	}, holder: "a", reason: "the Lease object was deleted and re-created"},
	// Not the term's: anyone's to write.
	{name: "LabelAdded", write: func(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease) error {
		l.Labels = map[string]string{"team": "infra"}
		_, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}, kept: true},
	{name: "PreferredHolderNamed", write: spec(func(s *coordinationv1.LeaseSpec) {
		s.Strategy, s.PreferredHolder = new(coordinationv1.OldestEmulationVersion), new("b")
	}), kept: true},
}

// newReleasedLease creates the Lease name, released, at leaseTransitions
// intruderStart: a claim of it is term intruderStart+1.
func newReleasedLease(t *testing.T, leases coordinationv1client.LeaseInterface, name string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	_, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new(""), LeaseDurationSeconds: new(int32(1)),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32(intruderStart))},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// intrude makes c's write over the Lease name as it is now, and checks the
// API server's answer.
func intrude(t *testing.T, leases coordinationv1client.LeaseInterface, name string, c intrusion) {
	t.Helper()
	ctx := context.Background()
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	err = c.write(ctx, leases, l)
	if c.refused {
		require.Truef(t, apierrors.IsInvalid(err), "the API server took the intruder's write (%v): its validation refuses it", err)
		return
	}
	require.NoError(t, err, "the intruder's write")
}

// requireOver checks that err, the answer to a renewal of term g after c's
// write, says the term is over as c says.
func requireOver(t *testing.T, c intrusion, g leasestore.Grant, err error) {
	t.Helper()
	var nh *leasestore.NotHeldError
	require.ErrorAsf(t, err, &nh, "the renewal after the intruder's write: %v", err)
	require.Equal(t, g.Token, nh.Token, "the term that is over")
	require.Equal(t, c.holder, nh.Holder, "who holds the Lease now: %v", nh)
	require.Contains(t, nh.Reason, c.reason)
}

// TestIntruderWriteToAHeldTerm: the store's answer to the renewal after
// each intruder's write: NotHeld, naming who the record names and why, for
// every write that changes the term's record; the term goes on, with the
// same token, after a write the API server refuses or one that leaves the
// term alone.
func TestIntruderWriteToAHeldTerm(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	leases := cs.CoordinationV1().Leases(ns)
	for _, c := range intrusions {
		t.Run(c.name, func(t *testing.T) {
			name := "raw-" + lowerName(c.name)
			newReleasedLease(t, leases, name)
			clk := testclock.NewClock(time.Now())
			s := newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk))
			ctx := context.Background()
			g, err := s.Claim(ctx, name, "a", 2*time.Second)
			require.NoError(t, err)
			require.Equal(t, uint64(intruderStart+1), g.Token)
			clk.Advance(500 * time.Millisecond)
			intrude(t, leases, name, c)
			clk.Advance(500 * time.Millisecond)

			renewed, err := s.Extend(ctx, g, 2*time.Second)
			if c.refused || c.kept {
				require.NoError(t, err, "the renewal after the intruder's write")
				require.Equal(t, g.Token, renewed.Token)
				return
			}
			requireOver(t, c, g, err)
			_, err = s.Extend(ctx, g, 2*time.Second)
			require.ErrorIs(t, err, leasestore.ErrNotHeld, "a second renewal")
			require.ErrorIs(t, s.Revoke(ctx, g), leasestore.ErrNotHeld, "a release of the term: the intruder's record stays")

			// Whoever claims next — once the record has gone unchanged for
			// its leaseDurationSeconds — gets a token above every one this
			// store handed out or saw on that object.
			clk.Advance(2 * time.Hour) // (DurationLonger: one hour)
			next, err := s.Claim(ctx, name, "a", 2*time.Second)
			require.NoError(t, err, "a claim once the intruder's record went unchanged")
			require.Greater(t, next.Token, g.Token, "the token of the term after the intruder's")
			_, err = s.Extend(ctx, next, 2*time.Second)
			require.NoError(t, err)
		})
	}
}

// TestTrackerLeavesHeldAtTheRenewalAfterAnIntruderWrite: a tracker holding
// the Lease says NotHeld — with the store's reason — at its first renewal
// after each write that changes the term's record, never Held; after a
// write refused or one that leaves the term alone, it renews and stays
// Held with the same token. The tracker and its store run on a testclock,
// so "its first renewal" is exactly one store call.
func TestTrackerLeavesHeldAtTheRenewalAfterAnIntruderWrite(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	leases := cs.CoordinationV1().Leases(ns)
	for _, c := range intrusions {
		t.Run(c.name, func(t *testing.T) {
			name := "tracker-" + lowerName(c.name)
			newReleasedLease(t, leases, name)
			clk := testclock.NewClock(time.Now())
			store := newStore(t, newClient(t, ""), ns, k8slease.WithClock(clk))
			cfg := trackerConfig(store, name, "a")
			cfg.Clock = clk
			tr, err := lease.NewTracker(cfg)
			require.NoError(t, err)
			defer tr.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := leasetest.Settle(ctx, tr, clk, 1)
			require.NoError(t, err)
			require.Equal(t, lease.Held, r.State, "the tracker's claim")
			held := r.Token

			intrude(t, leases, name, c)
			r, err = leasetest.Step(ctx, tr, clk) // its next renewal
			require.NoError(t, err)
			require.Equal(t, uint64(0), r.Calls.Extend.Ambiguous, "the renewal after the intruder's write was not answered")
			if c.refused || c.kept {
				require.Equal(t, lease.Held, r.State, "the renewal after a write that leaves the term alone")
				require.Equal(t, held, r.Token)
				return
			}
			require.Equal(t, lease.NotHeld, r.State, "the renewal after the intruder's write (the tracker still says %v, token %d)", r.State, r.Token)
			st, err := tr.Check(ctx, 0)
			require.Equal(t, lease.NotHeld, st.State)
			require.ErrorIs(t, err, lease.ErrNotLeader)
			var nh *leasestore.NotHeldError
			require.True(t, errors.As(err, &nh), "%v", err)
			require.Equal(t, held, nh.Token)
			require.Contains(t, nh.Reason, c.reason)
		})
	}
}

// lowerName is a test case's name as a Kubernetes object name's part.
func lowerName(s string) string {
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			if i > 0 {
				b = append(b, '-')
			}
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}
