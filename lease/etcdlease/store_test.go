package etcdlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

func TestClaimExtendRevoke(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newEtcdStore(t, cli, "/test/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	g, err := s.Claim(ctx, "singular", "a", 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, g.Duration)
	require.NotZero(t, g.Token)

	_, err = s.Claim(ctx, "singular", "b", time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "a", held.Holder)
	require.ErrorIs(t, err, leasestore.ErrHeld)

	g2, err := s.Extend(ctx, g, time.Second)
	require.NoError(t, err)
	require.Equal(t, g.Token, g2.Token)
	require.Equal(t, 2*time.Second, g2.Duration)

	require.NoError(t, s.Revoke(ctx, g))
	err = s.Revoke(ctx, g)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	_, err = s.Extend(ctx, g, time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	require.False(t, errors.Is(err, leasestore.ErrUnconfirmed))

	g3, err := s.Claim(ctx, "singular", "b", time.Second)
	require.NoError(t, err)
	require.Greater(t, g3.Token, g.Token)
}

func newStore(t *testing.T) (*etcdlease.Store, *clientv3.Client, *etcdtest.Member) {
	m := etcdtest.Start(t)
	return newEtcdStore(t, m.Client(), "/"+t.Name()+"/"), m.Client(), m
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// etcd, not this process, ends a term nobody extends: the key goes when its
// etcd lease runs out, and the next claimant gets a larger token.
func TestUnextendedTermIsDeletedByEtcd(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	a, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)
	require.Equal(t, time.Second, a.Duration)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := cli.Watch(wctx, s.Key("singular"), clientv3.WithRev(int64(a.Token)+1))
	select {
	case wr := <-events:
		require.NoError(t, wr.Err())
		require.Len(t, wr.Events, 1)
		require.Equal(t, mvccpb.DELETE, wr.Events[0].Type, "the key must go by expiry, not change")
	case <-ctx.Done():
		t.Fatal("etcd did not expire the unextended term")
	}

	b, err := s.Claim(ctx, "singular", "b", time.Second)
	require.NoError(t, err)
	require.Greater(t, b.Token, a.Token)
	_, err = s.Extend(ctx, a, time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
}

// The incident: a lease operation that times out is not a loss. With the
// only member gone, every call fails, and none of them definitively.
func TestUnreachableEtcdIsUnconfirmedNotNotHeld(t *testing.T) {
	t.Parallel()
	s, _, m := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 5*time.Second)
	require.NoError(t, err)

	m.Stop()

	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	_, err = s.Extend(short(), g, 5*time.Second)
	requireUnconfirmed(t, err, leasestore.OpExtend, g.Token)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = s.Claim(short(), "singular", "b", 5*time.Second)
	requireUnconfirmed(t, err, leasestore.OpClaim, 0)

	err = s.Revoke(short(), g)
	requireUnconfirmed(t, err, leasestore.OpRevoke, g.Token)

	_, err = s.Holder(short(), "singular")
	requireUnconfirmed(t, err, leasestore.OpRead, 0)
}

func requireUnconfirmed(t *testing.T, err error, op leasestore.Op, token uint64) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.NotErrorIs(t, err, leasestore.ErrNotHeld)
	require.NotErrorIs(t, err, leasestore.ErrHeld)
	var oe *leasestore.CallError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, op, oe.Op)
	require.Equal(t, "singular", oe.Name)
	require.Equal(t, token, oe.Token)
	require.NotNil(t, oe.Unwrap(), "the cause must be visible")
}

// A Store that did not grant the term (the process restarted) still extends
// and revokes it: the key records its etcd lease.
func TestRestartedStoreExtendsAndRevokes(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)

	restarted := newEtcdStore(t, cli, "/"+t.Name()+"/")
	g2, err := restarted.Extend(ctx, g, time.Second)
	require.NoError(t, err)
	require.Equal(t, g.Token, g2.Token)
	require.NoError(t, restarted.Revoke(ctx, g))
	_, err = s.Extend(ctx, g, time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	requireNoEtcdLeases(t, cli)
}

// A keep-alive renews an etcd lease for its original TTL; asking for more
// moves the key to a longer etcd lease, keeping the token.
func TestExtendLongerThanGrantedKeepsToken(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)

	g2, err := s.Extend(ctx, g, 2500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, g.Token, g2.Token)
	require.Equal(t, 3*time.Second, g2.Duration)

	h, err := s.Holder(ctx, "singular")
	require.NoError(t, err)
	require.Equal(t, g.Token, h.Token)
	require.Equal(t, "a", h.Holder)
	require.Greater(t, h.Duration, time.Second)

	// A shorter request is renewed for the (longer) granted TTL.
	g3, err := s.Extend(ctx, g2, time.Second)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, g3.Duration)

	// The first etcd lease was revoked when the key moved off it.
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	require.Len(t, leases.Leases, 1)
}

// A denied claim leaves no etcd lease behind, and names the holder.
func TestDeniedClaimRevokesItsEtcdLease(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 10*time.Second)
	require.NoError(t, err)
	for range 3 {
		_, err := s.Claim(ctx, "singular", "b", 10*time.Second)
		var held *leasestore.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, &leasestore.HeldError{Name: "singular", Holder: "a", Token: g.Token}, held)
	}
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	require.Len(t, leases.Leases, 1)
	require.NoError(t, s.Revoke(ctx, g))
	requireNoEtcdLeases(t, cli)
}

// A claim whose transaction was unconfirmed may have put the key; the next
// Claim revokes that etcd lease first, so the half-applied claim does not
// block everyone (its own retry included) for a whole TTL.
func TestUnconfirmedClaimIsCleanedUpByNextClaim(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	// What an applied-but-unconfirmed claim leaves: a key on a fresh lease.
	gr, err := cli.Grant(ctx, 30)
	require.NoError(t, err)
	_, err = cli.Put(ctx, s.Key("singular"), "a", clientv3.WithLease(gr.ID))
	require.NoError(t, err)
	etcdlease.AddOrphan(s, gr.ID)

	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err, "the orphaned claim should have been revoked")
	require.Equal(t, "a", g.Holder)
	require.NoError(t, s.Revoke(ctx, g))
	requireNoEtcdLeases(t, cli)
}

func requireNoEtcdLeases(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	leases, err := cli.Leases(testCtx(t))
	require.NoError(t, err)
	require.Empty(t, leases.Leases)
}

func TestHolderOfFreeLeaseIsNotHeld(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	_, err := s.Holder(testCtx(t), "nobody")
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
}

func TestBadArgumentsAreNotValid(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := testCtx(t)
	g := leasestore.Grant{Name: "n", Holder: "h", Token: 7, Duration: time.Second}
	zeroToken := g
	zeroToken.Token = 0
	noName := g
	noName.Name = ""
	for name, call := range map[string]func() error{
		"claim empty name":    func() error { _, err := s.Claim(ctx, "", "h", time.Second); return err },
		"claim empty holder":  func() error { _, err := s.Claim(ctx, "n", "", time.Second); return err },
		"claim zero duration": func() error { _, err := s.Claim(ctx, "n", "h", 0); return err },
		"claim negative":      func() error { _, err := s.Claim(ctx, "n", "h", -time.Second); return err },
		"extend zero token":   func() error { _, err := s.Extend(ctx, zeroToken, time.Second); return err },
		"extend zero d":       func() error { _, err := s.Extend(ctx, g, 0); return err },
		"revoke zero token":   func() error { return s.Revoke(ctx, zeroToken) },
		"revoke empty name":   func() error { return s.Revoke(ctx, noName) },
		"holder empty name":   func() error { _, err := s.Holder(ctx, ""); return err },
	} {
		err := call()
		require.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%s: got %v", name, err)
	}
}

// Both constructors validate alike: a nil client is a NotValid error, never
// a panic, and an option that does not apply to the store is rejected
// rather than ignored. A nil Option is ignored, as everywhere in coldstart
// (before round 4, NotValid here).
func TestConstructorsRejectBadArguments(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	for _, c := range []struct {
		name string
		opts []etcdlease.Option
		cli  *clientv3.Client
	}{
		{"nil client", nil, nil},
		{"negative MaxInFlight", []etcdlease.Option{etcdlease.WithMaxInFlight(-1)}, cli},
	} {
		_, err := etcdlease.NewStore(c.cli, "/p/", c.opts...)
		require.ErrorIs(t, err, jujuerrors.NotValid, "NewStore: %s", c.name)
		_, err = etcdlease.NewSessionStore(c.cli, "/p/", time.Second, c.opts...)
		require.ErrorIs(t, err, jujuerrors.NotValid, "NewSessionStore: %s", c.name)
	}
	_, err := etcdlease.NewStore(cli, "/p/", etcdlease.WithRevokeOnClose())
	require.ErrorIs(t, err, jujuerrors.NotValid, "WithRevokeOnClose does not apply to a Store")
	require.ErrorContains(t, err, "WithRevokeOnClose")
	_, err = etcdlease.NewStore(cli, "/p/", etcdlease.WithMaxInFlight(-1))
	require.ErrorContains(t, err, "MaxInFlight -1 (must be positive, or 0 for the default)")
	_, err = etcdlease.NewStore(cli, "/p/", etcdlease.WithMaxInFlight(0))
	require.NoError(t, err, "0 means the default")

	logs := logtest.New()
	_, err = etcdlease.NewStore(cli, "/p/", nil, etcdlease.WithMaxInFlight(1), nil)
	require.NoError(t, err, "nil options are ignored")
	ss, err := etcdlease.NewSessionStore(cli, "/nil/", 3*time.Second, nil, etcdlease.WithLogger(logs.Logger()), nil)
	require.NoError(t, err, "nil options are ignored")
	defer ss.Close()
	_, err = ss.Claim(testCtx(t), "x", "a", time.Second)
	require.NoError(t, err)
	logs.WaitMessage(t, "etcd session granted", 1) // the option beside the nils applied
}

// A term is a Store's only while its key is on the etcd lease that Store
// put it on (issue 31). Another Store extending the same grant (a
// successor process given its predecessor's grant, a second client)
// moves the key to an etcd lease of its own — knowing nothing of the
// first one's life (when it was last confirmed, in which raft term), it
// must, before it promises anything (see
// TestFaultDeposedLeadersRevokeNeverTwoLeaders) — and the term is then
// that Store's: the first one's next Extend says it is over, and the
// other goes on extending it. (Before issue 31 the first followed the key
// to the other's etcd lease, as it still follows its own Extends' moves.)
func TestExtendAfterAnotherStoreMovedTheTermSaysItIsOver(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)

	other := newEtcdStore(t, cli, "/"+t.Name()+"/")
	moved, err := other.Extend(ctx, g, 3*time.Second)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, moved.Duration)

	_, err = s.Extend(ctx, g, time.Second)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Regexp(t, "key moved to etcd lease [0-9a-f]+: written by another client$", nh.Reason)
	again, err := other.Extend(ctx, moved, time.Second)
	require.NoError(t, err, "the Store that moved the term holds it")
	require.Equal(t, g.Token, again.Token)
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	require.Len(t, leases.Leases, 1, "the earlier etcd leases were revoked by the moves")
}

// A key found on an etcd lease that a relet of this Store is moving it to
// is its own Extend's move, not another client's: ambiguous while the
// relet is in flight, never over (and never success: the lease's life is
// the relet's to record). Once no relet of the Store moves it there, the
// key on that etcd lease was put there by someone else.
func TestExtendTellsItsOwnMoveFromAnotherClients(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 2*time.Second)
	require.NoError(t, err)
	gr, err := cli.Grant(ctx, 60)
	require.NoError(t, err)
	done := etcdlease.StartMove(s, g.Token, gr.ID)
	_, err = cli.Put(ctx, s.Key("singular"), "a", clientv3.WithLease(gr.ID)) // as the relet's transaction does
	require.NoError(t, err)

	_, err = s.Extend(ctx, g, 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "our own move in flight")
	require.ErrorContains(t, err, "being moved to etcd lease")
	done()
	_, err = s.Extend(ctx, g, 2*time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "no move of ours put it there")
}

// A call whose ctx ended before it was sent is "not sent" — certain, so
// it matches leasestore.ErrNotSent and not leasestore.ErrUnconfirmed — on both stores.
func TestCallNotSentIsNotUnconfirmed(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	forEachStore(t, func(t *testing.T, kind storeKind) {
		s := kind.make(t, cli, "/notsent/"+kind.name+"/", time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		g := leasestore.Grant{Name: "x", Holder: "a", Token: 1}
		for op, call := range map[string]func() error{
			"claim":  func() error { _, err := s.Claim(ctx, "x", "a", time.Second); return err },
			"revoke": func() error { return s.Revoke(ctx, g) },
		} {
			err := call()
			require.ErrorIs(t, err, leasestore.ErrNotSent, op)
			require.NotErrorIs(t, err, leasestore.ErrUnconfirmed, op)
			require.ErrorIs(t, err, context.Canceled, op)
			require.ErrorContains(t, err, "not sent", op)
		}
	})
}

// A store whose calls wait out its call slots says so: the tracker's check
// carries an error matching ErrOverCapacity (and leasestore.ErrNotSent), so an
// overloaded store is visible at once rather than as a slow drift of
// unconfirmed renewals.
func TestOverCapacityIsVisibleToTheTracker(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newEtcdStore(t, cli, "/overcapacity/", etcdlease.WithMaxInFlight(1))
	release := etcdlease.HoldStoreSlot(s)
	defer release()
	tr := newTracker(t, lease.Config{Store: s, Name: "singular", Holder: "a", Duration: time.Second, Margin: slowTimer})
	ctx := testCtx(t)
	for {
		_, err := tr.Check(ctx, 0)
		require.Error(t, err, "no claim can be sent")
		if errors.Is(err, etcdlease.ErrOverCapacity) {
			require.ErrorIs(t, err, leasestore.ErrNotSent)
			require.NotErrorIs(t, err, lease.ErrNotLeader)
			require.ErrorContains(t, err, "over capacity")
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the tracker never said the store is over capacity; last error %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
