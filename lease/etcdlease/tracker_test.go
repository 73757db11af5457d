package etcdlease_test

// The lease.Tracker on etcd. etcd's TTLs run on its wall clock, so these
// tests use the wall clock too, with short terms (1–2 s), and follow the
// tracker's Current status rather than sleeping.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

func newTracker(t *testing.T, cfg lease.Config) *lease.Tracker {
	t.Helper()
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// nextStatus follows tr's Current status, from the one it has now, until
// want accepts one, failing the test if bad accepts any on the way or none
// is accepted in time. It returns the accepted status.
func nextStatus(t *testing.T, tr *lease.Tracker, timeout time.Duration, want, bad func(lease.Status) bool, what string) lease.Status {
	t.Helper()
	deadline := time.After(timeout)
	for {
		st, changed := tr.Current()
		if bad != nil && bad(st) {
			t.Fatalf("while waiting for %s: got %+v", what, st)
		}
		if want(st) {
			return st
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %s within %v (last %+v)", what, timeout, st)
		}
	}
}

// slowTimer is the Margin of these trackers, and so how late a renewal
// timer may fire before the tracker suspects a pause: a -race build on two
// busy cores can fire a wall-clock timer more than the default Margin
// (Duration/10) late, which the tracker rightly takes for a paused process.
// These tests are about the store, not pauses, so they tolerate that (and
// promise 2×Duration − slowTimer).
const slowTimer = 500 * time.Millisecond

func isHeld(st lease.Status) bool    { return st.State == lease.Held }
func isNotHeld(st lease.Status) bool { return st.State == lease.NotHeld }

// Two trackers on one etcd: one leads, the other is told definitively who
// does; the leader's renewals carry it across several terms with one token;
// when it releases, the other takes over with a larger token.
func TestTrackersOnEtcdOneLeader(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testTrackersOnEtcdOneLeader)
}

func testTrackersOnEtcdOneLeader(t *testing.T, kind storeKind) {
	m := etcdtest.Start(t)
	cliA, cliB := m.Client(), newClient(t, m.Endpoints()...)
	const d = time.Second // claims for 2 s
	cfgFor := func(cli *clientv3.Client, holder string) lease.Config {
		return lease.Config{
			Store: kind.make(t, cli, "/trackers/", 2*d), Name: "singular", Holder: holder,
			Duration: d, ReleaseOnClose: true, Margin: slowTimer,
		}
	}
	a := newTracker(t, cfgFor(cliA, "a"))
	first := nextStatus(t, a, 10*time.Second, isHeld, isNotHeld, "a to hold the lease")
	require.Equal(t, "a", first.Holder)

	b := newTracker(t, cfgFor(cliB, "b"))
	nextStatus(t, b, 10*time.Second, isNotHeld, isHeld, "b to learn a leads")
	ctx := testCtx(t)
	st, err := b.Check(ctx, d)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	require.NotErrorIs(t, err, lease.ErrRenewalFailed)
	var nl *lease.NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, "a", nl.Holder)
	require.Equal(t, lease.NotHeld, st.State)
	require.Equal(t, "a", st.Holder)

	// Renewals: a keeps the same term past two whole claimed terms.
	end := first.Until.Add(2 * 2 * d)
	last := first
	for last.Until.Before(end) {
		prev := last.Until
		last = nextStatus(t, a, 10*time.Second, func(st lease.Status) bool { return st.Until.After(prev) },
			func(st lease.Status) bool { return st.State != lease.Held || st.Token != first.Token },
			"a's next renewal")
		st, err := a.Check(ctx, d)
		require.NoError(t, err)
		require.Equal(t, lease.Held, st.State)
		require.Equal(t, first.Token, st.Token)
		// b never leads meanwhile. It normally knows a does; a claim of
		// its own that timed out under load leaves it unsure instead, which
		// is allowed (unknown is not "not leader"), leading is not.
		bst, err := b.Check(ctx, d)
		require.Error(t, err)
		require.NotEqual(t, lease.Held, bst.State)
		if errors.As(err, &nl) {
			require.Equal(t, "a", nl.Holder)
		} else {
			require.ErrorIs(t, err, lease.ErrRenewalFailed, "b's check: %v", err)
		}
	}

	// a releases on Close; b claims the freed lease with a larger token.
	require.NoError(t, a.Close())
	took := nextStatus(t, b, 10*time.Second, isHeld, nil, "b to take over")
	require.Equal(t, "b", took.Holder)
	require.Greater(t, took.Token, first.Token)
}

// An etcd term ended behind the tracker's back (revoked by another party)
// is a definitive loss: the next renewal reports ErrNotLeader, not
// ErrRenewalFailed, and the tracker claims a new term.
func TestTrackerLearnsRevokedTermDefinitively(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testTrackerLearnsRevokedTermDefinitively)
}

func testTrackerLearnsRevokedTermDefinitively(t *testing.T, kind storeKind) {
	cli := etcdtest.Start(t).Client()
	const d = time.Second
	store := kind.make(t, cli, "/revoked/", 2*d)
	tr := newTracker(t, lease.Config{Store: store, Name: "singular", Holder: "a", Duration: d, Margin: slowTimer})
	held := nextStatus(t, tr, 10*time.Second, isHeld, nil, "the first claim")

	ctx := testCtx(t)
	current, err := store.(interface {
		Holder(ctx context.Context, name string) (leasestore.Grant, error)
	}).Holder(ctx, "singular")
	require.NoError(t, err)
	require.NoError(t, kind.make(t, cli, "/revoked/", 2*d).Revoke(ctx, current))

	// The loss may pass quickly (the tracker claims again at once, the key
	// being free): the report counts it.
	again := nextStatus(t, tr, 10*time.Second, func(st lease.Status) bool { return st.State == lease.Held && st.Token > held.Token },
		nil, "a new term")
	require.Greater(t, again.Token, held.Token)
	rep := tr.Report()
	require.NotZero(t, rep.Losses, "the revoked term was learned definitively")
	require.Equal(t, uint64(2), rep.Calls.Claim.OK)
}

// Another client deletes the leader's key: etcdlease's Lost watch tells
// the tracker, which renews at once and learns definitively that its term
// is over. The leader work Lead runs sees its ctx end with a cause matching
// ErrNotLeader within the test's 20 s ctx, although with a one-minute
// Duration the next scheduled renewal would come only 57 s after the
// claim; the key being free, the tracker claims a new term and Lead runs
// the work again under it.
func TestTrackerLearnsDeletedKeyBeforeScheduledRenewal(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testTrackerLearnsDeletedKeyBeforeScheduledRenewal)
}

func testTrackerLearnsDeletedKeyBeforeScheduledRenewal(t *testing.T, kind storeKind) {
	m := etcdtest.Start(t)
	cli, other := m.Client(), newClient(t, m.Endpoints()...)
	const d = time.Minute // claims for 2 min, renews after 57 s
	store := kind.make(t, cli, "/deleted/", 2*d)
	tr := newTracker(t, lease.Config{Store: store, Name: "singular", Holder: "a", Duration: d})
	ctx := testCtx(t)
	held := nextStatus(t, tr, 10*time.Second, isHeld, isNotHeld, "the first claim")

	runs := make(chan lease.Status, 2)
	ended := make(chan error, 2)
	leadCtx, stopLeading := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() {
		led <- tr.Lead(leadCtx, func(ctx context.Context, st lease.Status) error {
			runs <- st
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	receive := func(ch <-chan lease.Status, what string) lease.Status {
		t.Helper()
		select {
		case st := <-ch:
			return st
		case <-ctx.Done():
			t.Fatalf("%s: the test's ctx ended first", what)
			return lease.Status{}
		}
	}
	require.Equal(t, held.Token, receive(runs, "the first run").Token)
	resp, err := other.Delete(ctx, "/deleted/singular")
	require.NoError(t, err)
	require.EqualValues(t, 1, resp.Deleted)

	select {
	case err = <-ended:
	case <-ctx.Done():
		t.Fatal("the deleted key was not learned before the test's ctx ended")
	}
	require.ErrorIs(t, err, lease.ErrNotLeader)
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "the store's definitive answer")
	require.NotErrorIs(t, err, lease.ErrRenewalFailed)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Equal(t, "singular", nh.Name)
	require.Equal(t, held.Token, nh.Token, "the loss names the term that is over")

	// The key is free: the tracker claims a new term, and Lead runs the
	// work again under it.
	again := receive(runs, "the run under a new term")
	require.Greater(t, again.Token, held.Token)
	stopLeading()
	require.ErrorIs(t, <-led, context.Canceled)
}

// stallingStore holds one armed Extend at its start until the test lets it
// go (or its ctx ends), so the test can act while a renewal is in flight.
type stallingStore struct {
	leasestore.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when the armed Extend has started
	proceed chan struct{} // closed by the test to let it continue
}

func (s *stallingStore) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
	s.entered = make(chan struct{})
	s.proceed = make(chan struct{})
}

func (s *stallingStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	entered, proceed := s.entered, s.proceed
	s.mu.Unlock()
	if armed {
		close(entered)
		select {
		case <-proceed:
		case <-ctx.Done():
		}
	}
	return s.Store.Extend(ctx, g, d)
}

// Failover, the incident on etcd: a three-member cluster, a client that
// knows all three, and a tracker renewing through it. During a renewal
// the raft leader is killed — the member every keep-alive ends at
// (followers forward lease renewals to it), and one of the members the
// client is connected to. Until the survivors elect a leader (no sooner
// than their 1 s election timeout) nothing can be confirmed: the check
// that waits on that renewal gets ErrRenewalFailed with the old validity,
// never ErrNotLeader. Once the client reaches the surviving quorum, the
// same term (same token: etcd's new leader keeps the leases alive) is
// confirmed again.
func TestFailoverRenewalFailsAmbiguouslyThenRecovers(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	cli := c.Client()
	store := &stallingStore{Store: newEtcdStore(t, cli, "/failover/")}
	const d = 2 * time.Second // claims for 4 s; call timeout 500 ms (Duration/4)
	tr := newTracker(t, lease.Config{Store: store, Name: "singular", Holder: "a", Duration: d, Margin: slowTimer})
	ctx := testCtx(t)
	first := nextStatus(t, tr, 15*time.Second, isHeld, isNotHeld, "the first claim")

	store.arm()
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("no renewal started")
	}
	// The renewal is in flight. What the tracker promised before it:
	before, err := tr.Check(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, first.Token, before.Token)

	// A check at renewal time asks for more than the cache covers, so it
	// waits for the in-flight renewal.
	type answer struct {
		st  lease.Status
		err error
	}
	checked := make(chan answer, 1)
	go func() {
		st, err := tr.Check(ctx, 3*time.Second)
		checked <- answer{st, err}
	}()
	leader, err := c.Leader()
	require.NoError(t, err)
	killed := time.Now()
	// Raft stops at once; closing the member's listeners (its gRPC server
	// stops gracefully) takes longer than the renewal's call timeout, so
	// the renewal goes on while they close.
	leader.Etcd().Server.HardStop()
	close(store.proceed)
	leader.Stop()

	got := <-checked
	require.ErrorIs(t, got.err, lease.ErrRenewalFailed, "the cluster could not confirm, got %v", got.err)
	require.NotErrorIs(t, got.err, lease.ErrNotLeader)
	require.Equal(t, lease.Held, got.st.State, "still held until the old validity ends")
	require.True(t, got.st.Until.Equal(before.Until), "until %v, want the old %v", got.st.Until, before.Until)
	var rf *lease.RenewalFailedError
	require.ErrorAs(t, got.err, &rf)
	require.ErrorIs(t, rf, leasestore.ErrUnconfirmed, "the cause must be the store's unconfirmed call")

	// The survivors elect a leader and the client reaches them: the same
	// term is confirmed again. It may pass through Unknown on the way if
	// the election outlasts the validity, but never NotHeld.
	recovered := nextStatus(t, tr, 15*time.Second,
		func(st lease.Status) bool {
			t.Logf("%v after killing leader %s: %v until %v", time.Since(killed).Round(time.Millisecond),
				leader.Name(), st.State, st.Until.Sub(before.Until).Round(time.Millisecond))
			return st.State == lease.Held && st.Until.After(before.Until)
		},
		isNotHeld, "the renewal through the surviving quorum")
	require.Equal(t, first.Token, recovered.Token)
	st, err := tr.Check(ctx, d)
	require.NoError(t, err)
	require.Equal(t, lease.Held, st.State)
}

// Failover, the incident on etcd, with a SessionStore: its Extend answers
// from the session's latest confirmed keep-alive, so what makes renewals
// ambiguous is the keep-alive itself, and an election that falls between
// two keep-alives goes unnoticed (the promise held throughout). So the
// client knows only the raft leader (through a proxy), which is killed and
// cut off: no member is reachable, the session's keep-alive is
// unconfirmed, and Extend is then
// ambiguous, and a check that needs a renewal gets ErrRenewalFailed, never
// ErrNotLeader. Once the client reaches the survivors, their new leader
// (which renews every lease as it takes over) confirms a keep-alive, and
// the same term (same token) is held again.
func TestSessionFailoverRenewalFailsAmbiguouslyThenRecovers(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	leader, err := c.Leader()
	require.NoError(t, err)
	toLeader := leader.Link()
	cli := newClient(t, toLeader.Endpoints()...)
	const d = time.Second // claims for 2 s
	store := newSessionStore(t, cli, "/failover/", 3*2*d)
	tr := newTracker(t, lease.Config{Store: store, Name: "singular", Holder: "a", Duration: d, Margin: slowTimer})
	ctx := testCtx(t)
	first := nextStatus(t, tr, 15*time.Second, isHeld, isNotHeld, "the first claim")

	killed := time.Now()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		leader.Stop() // its graceful shutdown takes seconds
	}()
	toLeader.Refuse()
	// Extend (local, as the tracker's renewals) until the session's
	// keep-alive is unconfirmed; never "not held".
	g := leasestore.Grant{Name: "singular", Holder: "a", Token: first.Token}
	for {
		_, err := store.Extend(ctx, g, 2*d)
		if err != nil {
			require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "Extend during the failover")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the session's keep-alive stayed confirmed with its only member cut off")
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("keep-alive unconfirmed %v after killing leader %s", time.Since(killed).Round(time.Millisecond), leader.Name())
	// A check asking for the whole claimed term (less the Margin) needs a
	// renewal, which the store cannot confirm.
	st, err := tr.Check(ctx, 2*d-slowTimer)
	require.ErrorIs(t, err, lease.ErrRenewalFailed, "the cluster could not confirm, got %v", err)
	require.NotErrorIs(t, err, lease.ErrNotLeader)
	require.NotEqual(t, lease.NotHeld, st.State)
	var rf *lease.RenewalFailedError
	require.ErrorAs(t, err, &rf)
	require.ErrorIs(t, rf, leasestore.ErrUnconfirmed, "the cause must be the store's unconfirmed call")

	healed := time.Now()
	var survivors []string
	for _, m := range c.Members() {
		if m != leader {
			survivors = append(survivors, m.Endpoints()...)
		}
	}
	cli.SetEndpoints(survivors...)
	recovered := nextStatus(t, tr, 15*time.Second,
		// A renewal sent after healing: its validity is the whole claimed
		// term (less the Margin) from then on.
		func(st lease.Status) bool {
			return st.State == lease.Held && !st.Until.Before(healed.Add(2*d-slowTimer))
		},
		isNotHeld, "the renewal through the surviving quorum")
	t.Logf("held again %v after the client reached the survivors", time.Since(healed).Round(time.Millisecond))
	require.Equal(t, first.Token, recovered.Token)
	<-stopped
}
