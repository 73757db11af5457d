package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A member stopped as a crash would and restarted keeps its data and its
// address: the client made before the stop reads what was written before it.
func TestMemberRestartKeepsDataAndAddress(t *testing.T) {
	m := etcdtest.Start(t)
	ctx := testCtx(t)
	cli := m.Client()
	_, err := cli.Put(ctx, "/k", "v")
	require.NoError(t, err)
	endpoints := m.Endpoints()

	m.Stop()
	require.Nil(t, m.Etcd())
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cli.Get(short, "/k")
	cancel()
	require.Error(t, err, "a stopped member must not answer")

	require.NoError(t, m.Restart())
	require.Equal(t, endpoints, m.Endpoints())
	resp, err := cli.Get(ctx, "/k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, "v", string(resp.Kvs[0].Value))
}

// NewMember, for an Example or a TestMain, is closed by the caller; after
// Close its client's calls fail and Restart is refused.
func TestNewMemberClose(t *testing.T) {
	m, err := etcdtest.NewMember()
	require.NoError(t, err)
	_, err = m.Client().Put(testCtx(t), "/k", "v")
	require.NoError(t, err)
	m.Close()
	m.Close()
	require.Error(t, m.Restart())
}

// A three-member cluster: its leader is found, stopped, and another member
// leads; the client of every member still writes; the stopped member
// restarts, rejoins and sees the write made while it was down.
func TestClusterLeaderStopAndRejoin(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	require.Len(t, c.Members(), 3)
	require.Len(t, c.Endpoints(), 3)
	ctx := testCtx(t)
	leader, err := c.Leader()
	require.NoError(t, err)

	leader.Stop()
	next, err := c.Leader()
	require.NoError(t, err)
	require.NotSame(t, leader, next)
	_, err = c.Client().Put(ctx, "/while-down", "v")
	require.NoError(t, err)

	require.NoError(t, leader.Restart())
	resp, err := leader.Client().Get(ctx, "/while-down")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "the restarted member rejoined and caught up")
}

func TestNewClusterRejectsNoMembers(t *testing.T) {
	_, err := etcdtest.NewCluster(0)
	require.Error(t, err)
}
