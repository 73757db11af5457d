package etcdlease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// grantCounter is a client whose etcd lease grants are counted, and
// announced on granted once answered.
type grantCounter struct {
	n       atomic.Int64
	granted chan struct{}
}

func newGrantCounter() (*grantCounter, []grpc.DialOption) {
	g := &grantCounter{granted: make(chan struct{}, 16)}
	return g, []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if method == "/etcdserverpb.Lease/LeaseGrant" {
				g.n.Add(1)
				g.granted <- struct{}{}
			}
			return err
		})}
}

// follow has the store b refused a claim of name, which a holds, and
// watching for the release; it returns the refusal and the watch.
func follow(t *testing.T, ctx context.Context, b *etcdlease.Store, name string) <-chan error {
	t.Helper()
	_, err := b.Claim(ctx, name, "b", 2*time.Second)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held)
	return b.WatchRelease(ctx, held)
}

// A claim woken by a release sends only its transaction: the etcd lease it
// would grant was granted as the watch saw the release (the graceful
// hand-over's gap was a grant longer than etcd's Election's). The spare
// has a second more than the TTL asked, so the claim is promised the whole
// TTL asked; its first renewal moves the term to an etcd lease of that
// TTL, so that a crash frees the lease as soon as it would have. Before
// the spare, the woken claim granted its etcd lease after the release.
func TestWokenClaimFindsItsEtcdLeaseGranted(t *testing.T) {
	t.Parallel()
	m := etcdtest.Start(t)
	ctx := testCtx(t)
	grants, dial := newGrantCounter()
	a := newEtcdStore(t, m.Client(), "/spare/")
	b := newEtcdStore(t, newClientWith(t, dial, m.Endpoints()...), "/spare/")
	ga, err := a.Claim(ctx, "h", "a", 2*time.Second)
	require.NoError(t, err)
	released := follow(t, ctx, b, "h")
	<-grants.granted // the refused claim's

	require.NoError(t, a.Revoke(ctx, ga))
	require.NoError(t, <-released)
	etcdlease.AwaitSpare(b)
	before := grants.n.Load()
	start := time.Now()
	gb, err := b.Claim(ctx, "h", "b", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, before, grants.n.Load(), "the woken claim granted an etcd lease of its own")
	require.Equal(t, 2*time.Second, gb.Duration)
	t.Logf("claim on the spare: %v", time.Since(start))
	grantedTTL := func() int64 {
		resp, err := m.Client().Get(ctx, "/spare/h")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		ttl, err := m.Client().TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		require.NoError(t, err)
		return ttl.GrantedTTL
	}
	require.Equal(t, int64(3), grantedTTL(), "the spare: a second more than asked")

	ge, err := b.Extend(ctx, gb, 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, ge.Duration)
	require.Equal(t, before+1, grants.n.Load(), "the first renewal's move to a fresh etcd lease")
	require.Equal(t, int64(2), grantedTTL(), "after the first renewal: the TTL asked")
	g, err := a.Holder(ctx, "h")
	require.NoError(t, err)
	require.Equal(t, "b", g.Holder)
	require.Equal(t, gb.Token, g.Token)
	_, err = b.Extend(ctx, ge, 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, before+1, grants.n.Load(), "the second renewal resumes the etcd lease")
}

// A spare older than a tenth of its TTL carries no claim: the claim grants
// afresh and is promised its whole TTL.
func TestStaleSpareIsNotUsed(t *testing.T) {
	t.Parallel()
	m := etcdtest.Start(t)
	ctx := testCtx(t)
	grants, dial := newGrantCounter()
	clk := testclock.NewClock(time.Now())
	a := newEtcdStore(t, m.Client(), "/spare/stale/")
	b := newEtcdStore(t, newClientWith(t, dial, m.Endpoints()...), "/spare/stale/", etcdlease.WithClock(clk))
	ga, err := a.Claim(ctx, "h", "a", 2*time.Second)
	require.NoError(t, err)
	released := follow(t, ctx, b, "h")
	<-grants.granted
	require.NoError(t, a.Revoke(ctx, ga))
	require.NoError(t, <-released)
	etcdlease.AwaitSpare(b)
	clk.Advance(200 * time.Millisecond)
	before := grants.n.Load()
	gb, err := b.Claim(ctx, "h", "b", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, before+1, grants.n.Load(), "a stale spare carried the claim")
	require.Equal(t, 2*time.Second, gb.Duration)
}
