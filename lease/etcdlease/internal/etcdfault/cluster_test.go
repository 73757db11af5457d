//go:build linux

package etcdfault_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
)

func startCluster(t *testing.T) *etcdfault.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdfault.Start(ctx, etcdfault.Config{Dir: t.TempDir(), TickMs: 50, ElectionMs: 500, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// awaitLeader polls until the majority's leader satisfies ok.
func awaitLeader(ctx context.Context, t *testing.T, c *etcdfault.Cluster, ok func(int) bool, what string) int {
	t.Helper()
	for {
		l, err := c.Leader(ctx)
		require.NoError(t, err, what)
		if ok(l) {
			return l
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Each fault does what it says on real etcd members: a link cut one way
// stops exactly that direction (the proxy knows which member dialled each
// connection), a partition elects a new leader, a paused member answers
// nothing until resumed, a killed member restarts on its data, and the
// events record when the cluster was whole again.
//
// (Named TestFault…, it runs in make test's fault lanes: see the Makefile.)
func TestFaultsOnMembers(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Leader(ctx)
	require.NoError(t, err)
	f := (l + 1) % c.Size() // a follower
	other := (l + 2) % c.Size()

	// A follower that cannot send still hears the leader's heartbeats:
	// it never campaigns, and the leader keeps a quorum with the other.
	c.Cut(f, l)
	c.Cut(f, other)
	<-time.After(2 * time.Second) // four election timeouts
	require.Equal(t, l, awaitLeader(ctx, t, c, func(int) bool { return true }, "leader"), "a cut of a follower's outbound links moved leadership")
	c.HealAll()

	// A leader that cannot send is replaced.
	for j := range c.Size() {
		if j != l {
			c.Cut(l, j)
		}
	}
	nl := awaitLeader(ctx, t, c, func(i int) bool { return i != l }, "a new leader after the leader's outbound links were cut")
	c.HealAll()

	// A partitioned member: the majority elects among itself.
	c.Isolate(nl)
	awaitLeader(ctx, t, c, func(i int) bool { return i != nl }, "a new leader after a partition")
	c.HealAll()

	cli := newClient(t, c.ClientURL(f))
	_, err = cli.Put(ctx, "k", "v")
	require.NoError(t, err)

	// A paused member answers nothing; resumed, it does.
	require.NoError(t, c.Pause(f))
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	_, err = cli.Get(pctx, "k")
	pcancel()
	require.Error(t, err, "a paused member answered")
	require.NoError(t, c.Resume(f))
	_, err = cli.Get(ctx, "k")
	require.NoError(t, err)

	// A killed member restarts on its data, at the same client URL.
	require.NoError(t, c.Kill(f))
	require.Error(t, c.Pause(f), "pausing a dead member")
	require.NoError(t, c.Restart(f))
	resp, err := cli.Get(ctx, "k", clientv3.WithSerializable()) // from its own data
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, "v", string(resp.Kvs[0].Value))

	var healed int
	for _, e := range c.Events() {
		if e.Healed {
			healed++
		}
	}
	require.Equal(t, 5, healed, "heals: %v", c.Events())
}
