package etcdlease_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Claims started together go out in batches of nested transactions; more
// than one batch's worth all succeed, each key on the one session lease.
func TestSessionStoreClaimStorm(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newSessionStore(t, cli, "/storm/", 10*time.Second)
	ctx := testCtx(t)
	const n = 300
	grants := make([]leasestore.Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grants[i], errs[i] = s.Claim(ctx, fmt.Sprintf("app-%d", i), "c0", 5*time.Second)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "claim %d", i)
		_, err := s.Extend(ctx, grants[i], 5*time.Second)
		require.NoError(t, err, "extend %d", i)
	}
	resp, err := cli.Get(ctx, "/storm/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, n)
	for _, kv := range resp.Kvs {
		require.Equal(t, resp.Kvs[0].Lease, kv.Lease, "every key on the session's lease")
	}
}

// A claim whose ctx has ended is not sent: its error says so, and only so
// (not sent is certain, not "unconfirmed"); it still names the call.
func TestSessionStoreClaimNotSent(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newSessionStore(t, cli, "/notsent/", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, "singular", "a", time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	require.NotErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.ErrorIs(t, err, context.Canceled)
	var oe *leasestore.CallError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, leasestore.OpClaim, oe.Op)
	require.Equal(t, "singular", oe.Name)
	resp, err := cli.Get(testCtx(t), "/notsent/singular")
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, "a claim not sent put nothing")
}

// Close stops the keep-alive: the keys stay until the TTL runs out, or go
// at once WithRevokeOnClose. Calls after Close are not sent, and counted so.
func TestSessionStoreClose(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	for _, c := range []struct {
		name   string
		opts   []etcdlease.Option
		remain bool
	}{
		{"keys expire with the TTL", nil, true},
		{"WithRevokeOnClose", []etcdlease.Option{etcdlease.WithRevokeOnClose()}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := "/close/" + t.Name() + "/"
			s := newSessionStore(t, cli, prefix, 10*time.Second, c.opts...)
			g, err := s.Claim(ctx, "singular", "a", time.Second)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, s.Close(), "Close is idempotent")
			resp, err := cli.Get(ctx, prefix+"singular")
			require.NoError(t, err)
			require.Equal(t, c.remain, len(resp.Kvs) == 1)
			before := s.StoreReport()
			requireNotSent := func(err error, what string) {
				t.Helper()
				require.ErrorIs(t, err, leasestore.ErrNotSent, what)
				require.NotErrorIs(t, err, leasestore.ErrUnconfirmed, what)
				require.NotErrorIs(t, err, leasestore.ErrNotHeld, what)
				require.ErrorContains(t, err, "session store closed", what)
			}
			_, err = s.Extend(ctx, g, time.Second)
			requireNotSent(err, "Extend")
			_, err = s.Claim(ctx, "other", "a", time.Second)
			requireNotSent(err, "Claim")
			// Neither sends anything: the key is neither read nor deleted.
			err = s.Revoke(ctx, g)
			requireNotSent(err, "Revoke")
			_, err = s.Holder(ctx, "singular")
			requireNotSent(err, "Holder")
			after := s.StoreReport()
			for op, n := range map[string][2]leasestore.Calls{
				"Claim": {before.Claim, after.Claim}, "Extend": {before.Extend, after.Extend}, "Revoke": {before.Revoke, after.Revoke},
			} {
				n[0].NotSent++
				require.Equal(t, n[0], n[1], "%s after Close counts as NotSent", op)
			}
			resp, err = cli.Get(ctx, prefix+"singular")
			require.NoError(t, err)
			require.Equal(t, c.remain, len(resp.Kvs) == 1)
		})
	}
}

func TestNewSessionStoreRejectsBadArguments(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	for _, c := range []struct {
		name   string
		cli    *clientv3.Client
		prefix string
		ttl    time.Duration
	}{
		{"nil client", nil, "/p/", time.Second},
		{"empty prefix", cli, "", time.Second},
		{"zero ttl", cli, "/p/", 0},
		// etcd's lease.MaxLeaseTTL is 9e9 s: every grant would be refused.
		{"ttl above etcd's maximum", cli, "/p/", 9_000_000_001 * time.Second},
	} {
		_, err := etcdlease.NewSessionStore(c.cli, c.prefix, c.ttl)
		require.ErrorIs(t, err, jujuerrors.NotValid, c.name)
	}
}

// The grant arithmetic, on a testclock (etcd's TTLs still run on its own
// clock, far longer than the few seconds of testclock time here): a grant
// never reaches past the latest confirmed keep-alive's send time + TTL,
// even when more is asked; a confirmed keep-alive moves that bound; a term
// not extended within its grant is over and its key deleted by the store.
func TestSessionStoreGrantsNoFurtherThanTheKeepAlive(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	clk := testclock.NewClock(time.Now())
	const ttl = 6 * time.Second // a keep-alive every 2 s
	logs := logtest.New()
	s := newSessionStore(t, cli, "/grant/", ttl, etcdlease.WithClock(clk), etcdlease.WithLogger(logs.Logger()))
	ctx := testCtx(t)
	// The keep-alive and the expiry loops each wait on a timer.
	advance := func(d time.Duration) { require.NoError(t, clk.WaitAdvance(d, 10*time.Second, 2)) }

	g, err := s.Claim(ctx, "singular", "a", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, ttl, g.Duration, "no further than the session grant's send time + TTL")

	advance(time.Second)
	g, err = s.Extend(ctx, g, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, ttl-time.Second, g.Duration, "the same bound, one second closer")

	advance(1500 * time.Millisecond) // past the keep-alive's 2 s: it is sent now
	for {
		g, err = s.Extend(ctx, g, 10*time.Second)
		require.NoError(t, err)
		if g.Duration == ttl {
			break // confirmed: the bound is its send time + TTL
		}
		require.Equal(t, ttl-2500*time.Millisecond, g.Duration, "before the keep-alive is answered")
		select {
		case <-ctx.Done():
			t.Fatal("the keep-alive was never confirmed")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The term's grant runs out unextended while the store can reach etcd
	// (each keep-alive, every 2 s, is confirmed before the clock moves on):
	// its holder stopped asking, so it is over.
	lost := s.Lost(ctx, g)
	for range ttl / (2 * time.Second) {
		advance(2 * time.Second) // a keep-alive is due
		for {
			until, ok := etcdlease.SessionConfirmedUntil(s)
			if ok && until.Equal(clk.Now().Add(ttl)) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the keep-alive was never confirmed")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	_, err = s.Extend(ctx, g, time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "a term not extended within its grant is over")
	requireClosed(t, lost, "Lost stayed open for an expired term")
	for {
		resp, err := cli.Get(ctx, "/grant/singular")
		require.NoError(t, err)
		if len(resp.Kvs) == 0 {
			break // deleted by the store's expiry loop
		}
		select {
		case <-ctx.Done():
			t.Fatal("the expired term's key was never deleted")
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, r := range logs.Records() {
		require.Contains(t, r.Message, "etcd session", "transitions only, no per-round count of deleted keys")
	}
}

// A session etcd no longer has (here revoked by another client; in life,
// expired while this process was cut off) ends every term definitively,
// and the next claim gets a new session.
func TestSessionStoreLostSessionEndsEveryTerm(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	other := newClient(t, cli.Endpoints()...)
	s := newSessionStore(t, cli, "/lostsession/", 3*time.Second) // a keep-alive every second
	ctx := testCtx(t)
	var grants []leasestore.Grant
	for _, name := range []string{"mysql", "wordpress"} {
		g, err := s.Claim(ctx, name, "c0", time.Second)
		require.NoError(t, err)
		grants = append(grants, g)
	}
	resp, err := cli.Get(ctx, "/lostsession/mysql")
	require.NoError(t, err)
	session := clientv3.LeaseID(resp.Kvs[0].Lease)
	_, err = other.Revoke(ctx, session)
	require.NoError(t, err)

	for _, g := range grants {
		for {
			_, err := s.Extend(ctx, g, time.Second)
			if err != nil {
				require.ErrorIs(t, err, leasestore.ErrNotHeld, "extend %s", g.Name)
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s still extended after its session was revoked", g.Name)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	g, err := s.Claim(ctx, "mysql", "c0", time.Second)
	require.NoError(t, err)
	require.Greater(t, g.Token, grants[0].Token)
	resp, err = cli.Get(ctx, "/lostsession/mysql")
	require.NoError(t, err)
	require.NotEqual(t, session, clientv3.LeaseID(resp.Kvs[0].Lease), "a new session")
}

// A later Extend asking less than an earlier one does not cut the earlier
// promise short: the term stays held, and its key stays, until the end of
// the furthest grant.
func TestSessionStoreExtendNeverShortensAPromise(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	clk := testclock.NewClock(time.Now())
	s := newSessionStore(t, cli, "/shorten/", 30*time.Second, etcdlease.WithClock(clk))
	other := newSessionStore(t, cli, "/shorten/", 30*time.Second)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "x", "a", 10*time.Second)
	require.NoError(t, err)
	long, err := s.Extend(ctx, g, 10*time.Second) // held until t0 + 10 s
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, long.Duration)
	short, err := s.Extend(ctx, g, time.Second) // asks only until t0 + 1 s
	require.NoError(t, err)
	require.Equal(t, time.Second, short.Duration)

	// t0 + 2 s, the expiry loop having run twice: within the first promise.
	for range 2 {
		require.NoError(t, clk.WaitAdvance(time.Second, 10*time.Second, 2))
	}
	_, err = other.Claim(ctx, "x", "b", 10*time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held, "b claimed x while a's first grant stood")
	require.Equal(t, "a", held.Holder)
	_, err = s.Extend(ctx, g, 10*time.Second)
	require.NoError(t, err, "the term is held until t0 + 10 s")
}

// The put of an unconfirmed claim that the store found not applied, applied
// after all (etcd may apply a transaction late), leaves a key on the
// session that no term owns. The store deletes it — from the watch's view
// of it, or when a claim of the name finds it — rather than keep it alive
// and deny every claim of the name until the process ends.
func TestSessionStoreOrphanOfLateUnsurePut(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	clk := testclock.NewClock(time.Now())
	logs := logtest.New()
	s := newSessionStore(t, cli, "/orphan/", 30*time.Second, etcdlease.WithClock(clk), etcdlease.WithLogger(logs.Logger()))
	ctx := testCtx(t)
	_, err := s.Claim(ctx, "warm", "a", time.Second) // makes the session
	require.NoError(t, err)
	latePut := func(name string) int64 {
		id, expire := etcdlease.RecordUnsure(s, name, "a")
		expire() // the key is absent: the claim was not applied
		resp, err := cli.Put(ctx, "/orphan/"+name, "a", clientv3.WithLease(id))
		require.NoError(t, err)
		return resp.Header.Revision
	}

	t.Run("a claim finds it", func(t *testing.T) {
		rev := latePut("claimed")
		g, err := s.Claim(ctx, "claimed", "a", time.Second)
		require.NoError(t, err, "the orphan is ours: deleted and claimed again")
		require.Greater(t, g.Token, uint64(rev))
	})
	t.Run("the watch sees it", func(t *testing.T) {
		latePut("watched")
		require.Eventually(t, func() bool {
			// The expiry looks every second, on the store's clock.
			require.NoError(t, clk.WaitAdvance(time.Second, 10*time.Second, 2))
			resp, err := cli.Get(ctx, "/orphan/watched")
			require.NoError(t, err)
			return len(resp.Kvs) == 0
		}, 10*time.Second, 10*time.Millisecond, "the orphan was never deleted")
	})
}

// A lease.Tracker ends a call with a timer that cancels its ctx, not with a
// deadline. A claim taken into a batch that cannot be sent (no member
// reachable) returns, when its ctx ends, an error saying it was not sent,
// and the batch ends with its last caller rather than at Close.
func TestSessionStoreBatchEndsWithItsCallers(t *testing.T) {
	t.Parallel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	s := newSessionStore(t, cli, "/unreachable/", 6*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimed := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "x", "a", time.Second)
		claimed <- err
	}()
	require.Eventually(t, func() bool {
		waiting, senders := etcdlease.ClaimSenders(s)
		return waiting == 0 && senders == 1
	}, 10*time.Second, time.Millisecond, "the claim was never taken into a batch")
	cancel() // as the tracker's timer does
	err = <-claimed
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	require.NotErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.Eventually(t, func() bool {
		_, senders := etcdlease.ClaimSenders(s)
		return senders == 0
	}, 10*time.Second, time.Millisecond, "the batch outlived its only caller")
}

// A claim whose key was put when the session's confirmed promise had run
// out is granted nothing (its error is ambiguous); its key is ours to
// delete, so a retry once the session is confirmed again gets the lease
// instead of being denied in our own name.
func TestSessionStoreRetryAfterUngrantableClaim(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	clk := testclock.NewClock(time.Now())
	const ttl = 30 * time.Second
	s := newSessionStore(t, cli, "/ungrantable/", ttl, etcdlease.WithClock(clk))
	ctx := testCtx(t)
	_, err := s.Claim(ctx, "warm", "a", time.Second) // makes the session
	require.NoError(t, err)

	etcdlease.SetSessionPromise(s, clk.Now()) // no keep-alive confirmed for a TTL
	_, err = s.Claim(ctx, "x", "a", time.Second)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.NotErrorIs(t, err, leasestore.ErrHeld)
	resp, err := cli.Get(ctx, "/ungrantable/x")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "the claim's key was put")

	etcdlease.SetSessionPromise(s, clk.Now().Add(ttl)) // a keep-alive confirmed
	g, err := s.Claim(ctx, "x", "a", time.Second)
	require.NoError(t, err, "the ungranted key is not someone else's term")
	require.Greater(t, g.Token, uint64(resp.Kvs[0].CreateRevision))
}

// Claims wait for a call slot (here held by the test) before they are
// taken into a batch, and only the claims whose callers still wait are
// sent: one whose ctx ended meanwhile returned an error saying it was not
// sent, and its key is not put; when every caller waiting is gone, nothing
// is sent at all and the sender ends.
func TestSessionStoreBatchLeavesOutGoneCallers(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newSessionStore(t, cli, "/gone/", 30*time.Second, etcdlease.WithMaxInFlight(1))
	ctx := testCtx(t)
	_, err := s.Claim(ctx, "warm", "a", time.Second) // makes the session
	require.NoError(t, err)
	senders := func(waiting, senders int) func() bool {
		return func() bool {
			w, s := etcdlease.ClaimSenders(s)
			return w == waiting && s == senders
		}
	}
	type result struct {
		g   leasestore.Grant
		err error
	}
	claim := func(name string) (context.CancelFunc, chan result) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan result, 1)
		go func() {
			g, err := s.Claim(cctx, name, "a", time.Second)
			done <- result{g, err}
		}()
		return cancel, done
	}

	release := etcdlease.HoldSlot(s)
	cancelAlone, alone := claim("alone")
	require.Eventually(t, senders(1, 1), 10*time.Second, time.Millisecond, "alone never queued")
	cancelAlone()
	require.ErrorIs(t, (<-alone).err, leasestore.ErrNotSent)
	require.Eventually(t, senders(0, 0), 10*time.Second, time.Millisecond, "the sender outlived alone's caller")
	cancelGone, gone := claim("gone")
	_, stays := claim("stays")
	require.Eventually(t, senders(2, 1), 10*time.Second, time.Millisecond, "gone and stays never queued")
	cancelGone()
	require.ErrorIs(t, (<-gone).err, leasestore.ErrNotSent)
	require.Eventually(t, senders(1, 1), 10*time.Second, time.Millisecond, "gone still waits")
	release()
	r := <-stays
	require.NoError(t, r.err)
	require.Eventually(t, senders(0, 0), 10*time.Second, time.Millisecond)
	for _, name := range []string{"alone", "gone"} {
		resp, err := cli.Get(ctx, "/gone/"+name)
		require.NoError(t, err)
		require.Empty(t, resp.Kvs, "%s was put for a caller long gone", name)
	}
	resp, err := cli.Get(ctx, "/gone/stays")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, int64(r.g.Token), resp.Kvs[0].CreateRevision)
}

// A keep-alive answer alone never extends the session's promise: a raft
// leader cut off from its quorum answers keep-alives from its own lessor.
// Here the client's reads are cut (a gRPC interceptor fails every Range
// and Txn: the confirming read is a committed transaction) while
// keep-alives still reach etcd and are answered: the store must stop
// trusting them — every Extend turns ambiguous once the promise confirmed
// before the cut runs low — and trust them again, same term, once reads
// pass (on a new session: the cut outlasted the TTL). Before the confirming read, the answered
// keep-alives alone kept every Extend granted.
func TestSessionKeepAliveNeedsItsConfirmingRead(t *testing.T) {
	t.Parallel()
	m := etcdtest.Start(t)
	var cutReads atomic.Bool
	cli := newClientWith(t, []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if cutReads.Load() && (method == "/etcdserverpb.KV/Range" || method == "/etcdserverpb.KV/Txn") {
				return status.Error(codes.Unavailable, "test: reads cut")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}, m.Endpoints()...)
	const ttl = 3 * time.Second // a keep-alive every second
	s := newSessionStore(t, cli, "/confirm/", ttl)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)

	cutReads.Store(true)
	for {
		_, err := s.Extend(ctx, g, time.Second)
		if err != nil {
			require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "a session not confirmed is ambiguous")
			require.NotErrorIs(t, err, leasestore.ErrNotHeld)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("answered keep-alives kept extending the session without a confirming read")
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, confirmed := etcdlease.SessionConfirmedUntil(s)
	require.False(t, confirmed)

	cutReads.Store(false)
	for {
		g2, err := s.Extend(ctx, g, time.Second)
		if err == nil {
			require.Equal(t, g.Token, g2.Token, "the same term")
			return
		}
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
		select {
		case <-ctx.Done():
			t.Fatal("the session was never confirmed again")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A claim whose ctx ends while its batch waits for a call slot is not sent
// and says the store is over capacity, as any other call does.
func TestSessionClaimWaitingForASlotIsOverCapacity(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newSessionStore(t, cli, "/oc/", 6*time.Second, etcdlease.WithMaxInFlight(1))
	_, err := s.Claim(testCtx(t), "warm", "a", time.Second) // the session exists
	require.NoError(t, err)
	release := etcdlease.HoldSlot(s)
	defer release()
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err = s.Claim(ctx, "x", "a", time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	require.ErrorIs(t, err, etcdlease.ErrOverCapacity)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.Equal(t, uint64(1), s.StoreReport().Claim.NotSent)
	resp, err := cli.Get(testCtx(t), "/oc/x")
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, "a claim not sent put nothing")
}
