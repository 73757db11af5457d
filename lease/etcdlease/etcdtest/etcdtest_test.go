package etcdtest_test

import (
	"context"
	"net/url"
	"strconv"
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
	for _, m := range c.Members() {
		require.Less(t, memberPort(t, m), etcdtest.EphemeralLow(), "%s's client port: below the ephemeral range (see TestMemberPortsOutsideTheEphemeralRange)", m.Name())
	}
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

// A member's client port lies below the kernel's
// ephemeral range: no client connection or port-0 listener, of this test or
// a parallel one, can take it while the member is stopped, and its restart
// finds it free. (With port 0 the kernel picked it from that range, and a
// restart among parallel tests failed now and then: "address already in
// use".)
func TestMemberPortsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	low := etcdtest.EphemeralLow()
	m := etcdtest.Start(t)
	require.Less(t, memberPort(t, m), low, "a single member's client port")
	m.Stop()
	require.NoError(t, m.Restart())
	require.Less(t, memberPort(t, m), low)
}

// memberPort is the port of m's client URL.
func memberPort(t *testing.T, m *etcdtest.Member) int {
	t.Helper()
	u, err := url.Parse(m.Endpoints()[0])
	require.NoError(t, err)
	p, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return p
}
