package etcdlease_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// fencer is what both stores offer for the caller's own transactions.
type fencer interface {
	Fence(name string, token uint64) clientv3.Cmp
}

// pausableStore is the store of a process that can be paused (a GC stall,
// a frozen VM): while paused, a call sends nothing and waits for its ctx to
// end, as a call of a stopped process would time out.
type pausableStore struct {
	leasestore.Store
	paused atomic.Bool
}

func (s *pausableStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	if s.paused.Load() {
		<-ctx.Done()
		return leasestore.Grant{}, ctx.Err()
	}
	return s.Store.Claim(ctx, name, holder, d)
}

func (s *pausableStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	if s.paused.Load() {
		<-ctx.Done()
		return leasestore.Grant{}, ctx.Err()
	}
	return s.Store.Extend(ctx, g, d)
}

// fencedPut puts key=value through cli in a transaction guarded by cmp,
// and says whether it was applied.
func fencedPut(ctx context.Context, t *testing.T, cli *clientv3.Client, cmp clientv3.Cmp, key, value string) bool {
	t.Helper()
	applied, err := txnPut(ctx, cli, cmp, key, value)
	require.NoError(t, err)
	return applied
}

func txnPut(ctx context.Context, cli *clientv3.Client, cmp clientv3.Cmp, key, value string) (bool, error) {
	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, value)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

func valueOf(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "key %s", key)
	return string(resp.Kvs[0].Value)
}

// A leader that is paused while it works — its fn holding the Status it
// leads under — and wakes up after another tracker took over writes late:
// fenced with its term's token, the write is refused; its unfenced twin,
// the same write through the same client, is applied (the corruption the
// fence prevents). While it led, the same fenced write was applied, and the
// new leader's fenced write is.
func TestFenceRefusesPausedLeadersLateWrite(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testFenceRefusesPausedLeadersLateWrite)
}

func testFenceRefusesPausedLeadersLateWrite(t *testing.T, kind storeKind) {
	m := etcdtest.Start(t)
	cliA, cliB := m.Client(), newClient(t, m.Endpoints()...)
	const d = 500 * time.Millisecond // claims for 1 s
	cfg := func(s leasestore.Store, holder string) lease.Config {
		return lease.Config{Store: s, Name: "singular", Holder: holder, Duration: d, Margin: d - d/5}
	}
	storeA, storeB := kind.make(t, cliA, "/fence/", 2*d), kind.make(t, cliB, "/fence/", 2*d)
	pausable := &pausableStore{Store: storeA}
	a := newTracker(t, cfg(pausable, "a"))
	ctx := testCtx(t)
	const data = "/data/config"

	type write struct {
		applied bool
		err     error
	}
	leading := make(chan lease.Status, 1)
	wake := make(chan struct{})
	wrote := make(chan [2]write, 1)
	led := make(chan error, 1)
	errWritten := errors.New("written")
	go func() {
		led <- a.Lead(ctx, func(_ context.Context, st lease.Status) error {
			var w [2]write
			w[0].applied, w[0].err = txnPut(ctx, cliA, storeA.(fencer).Fence("singular", st.Token), data, "a, leading")
			leading <- st
			<-wake // paused: it does not see its ctx end
			w[1].applied, w[1].err = txnPut(ctx, cliA, storeA.(fencer).Fence("singular", st.Token), data, "a, late")
			wrote <- w
			return errWritten
		})
	}()
	var aSt lease.Status
	select {
	case aSt = <-leading:
	case <-ctx.Done():
		t.Fatal("a never led")
	}
	require.Equal(t, "a, leading", valueOf(ctx, t, cliA, data), "a's fenced write while it leads is applied")

	pausable.paused.Store(true)
	b := newTracker(t, cfg(storeB, "b"))
	bSt := nextStatus(t, b, 15*time.Second, isHeld, nil, "b to take over from the paused a")
	require.Greater(t, bSt.Token, aSt.Token)

	close(wake)
	var got [2]write
	select {
	case got = <-wrote:
	case <-ctx.Done():
		t.Fatal("a's late write never finished")
	}
	require.Equal(t, write{applied: true}, got[0])
	require.Equal(t, write{applied: false}, got[1], "the paused leader's late fenced write must be refused")
	require.Equal(t, "a, leading", valueOf(ctx, t, cliA, data), "nothing of a's late write landed")
	require.ErrorIs(t, <-led, errWritten, "Lead returns fn's own error")

	// The unfenced twin goes through: that is what the fence prevents.
	_, err := cliA.Txn(ctx).Then(clientv3.OpPut(data, "a, late, unfenced")).Commit()
	require.NoError(t, err)
	require.Equal(t, "a, late, unfenced", valueOf(ctx, t, cliA, data))

	require.True(t, fencedPut(ctx, t, cliB, storeB.(fencer).Fence("singular", bSt.Token), data, "b"),
		"the new leader's fenced write is applied")
	require.Equal(t, "b", valueOf(ctx, t, cliB, data))
}

// A fence that cannot belong to a term never holds, on a free lease too
// (CreateRevision == 0 would hold exactly when nobody holds the lease), on
// a held one, and under another prefix the fence is another key's.
func TestFenceFailsClosed(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	forEachStore(t, func(t *testing.T, kind storeKind) {
		prefix := "/failclosed/" + kind.name + "/"
		s := kind.make(t, cli, prefix, time.Second)
		f := s.(fencer)
		for _, token := range []uint64{0, 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
			require.False(t, fencedPut(ctx, t, cli, f.Fence("free", token), "/x", "v"), "free lease, token %d", token)
		}
		g, err := s.Claim(ctx, "held", "a", time.Second)
		require.NoError(t, err)
		require.True(t, fencedPut(ctx, t, cli, f.Fence("held", g.Token), "/x", "v"), "the live term's fence holds")
		for name, cmp := range map[string]clientv3.Cmp{
			"token 0":        f.Fence("held", 0),
			"an older token": f.Fence("held", g.Token-1),
			"a later token":  f.Fence("held", g.Token+1),
			"empty name":     f.Fence("", g.Token),
			"another prefix": kind.make(t, cli, "/elsewhere/", time.Second).(fencer).Fence("held", g.Token),
		} {
			require.False(t, fencedPut(ctx, t, cli, cmp, "/x", "v"), "%s on a held lease", name)
		}
		require.NoError(t, s.Revoke(ctx, g))
		require.False(t, fencedPut(ctx, t, cli, f.Fence("held", g.Token), "/x", "v"), "a revoked term's fence")
	})
}
