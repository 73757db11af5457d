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
	c, err := etcdfault.Start(ctx, etcdfault.Config{Dir: t.TempDir(), Logf: t.Logf})
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

func TestClusterFaults(t *testing.T) {
	start := time.Now()
	c := startCluster(t)
	t.Logf("started in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Leader(ctx)
	require.NoError(t, err)
	t.Logf("leader m%d", l)
	c.Isolate(l)
	t0 := time.Now()
	for {
		nl, err := c.Leader(ctx)
		require.NoError(t, err)
		if nl != l {
			t.Logf("new leader m%d after %v", nl, time.Since(t0))
			break
		}
		<-time.After(100 * time.Millisecond)
	}
	c.HealAll()
	cli := newClient(t, c.ClientURL(l))
	_, err = cli.Put(ctx, "k", "v")
	require.NoError(t, err)
	require.NoError(t, c.Kill(l))
	require.NoError(t, c.Restart(l))
	resp, err := cli.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	t.Logf("events %v", c.Events())
}
