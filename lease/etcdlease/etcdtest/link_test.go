package etcdtest_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

// requireAbsent fails unless the member, asked directly, has no key k.
func requireAbsent(t *testing.T, m *etcdtest.Member, k, why string) {
	t.Helper()
	resp, err := m.Client().Get(testCtx(t), k)
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, why)
}

// requireClosed fails unless the link closed c: a read ends with an error
// that is not a timeout (the member sends nothing unasked).
func requireClosed(t *testing.T, c net.Conn, which string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err, which)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: still open after 10s", which)
}

// A cut link is a blackhole: a call through it runs into its own deadline,
// and what it sent never reaches the member, not even after the heal, when
// every connection that lived through the cut is closed; once healed, the
// same client calls through it again.
func TestLinkCutBlackholesUntilHealed(t *testing.T) {
	m := etcdtest.Start(t)
	link := m.Link()
	cli := link.Client()
	ctx := testCtx(t)
	_, err := cli.Put(ctx, "/before", "v")
	require.NoError(t, err)
	raw, err := net.Dial("tcp", strings.TrimPrefix(link.Endpoints()[0], "http://"))
	require.NoError(t, err)
	defer raw.Close()

	link.Cut()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cli.Put(short, "/during", "v")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	requireAbsent(t, m, "/during", "a cut link let a write through")
	_, err = m.Client().Put(ctx, "/direct", "v")
	require.NoError(t, err, "the member's own client does not cross the link")

	link.Heal()
	requireClosed(t, raw, "a connection that lived through the cut")
	requireAbsent(t, m, "/during", "bytes sent during the cut arrived after the heal")
	resp, err := cli.Get(ctx, "/direct")
	require.NoError(t, err, "the client redials once healed")
	require.Len(t, resp.Kvs, 1)
}

// A refused link closes every connection, open or new, at once: a read
// ends with an error that is not a timeout. Healed, it forwards again.
func TestLinkRefuseClosesConnections(t *testing.T) {
	m := etcdtest.Start(t)
	link := m.Link()
	addr := strings.TrimPrefix(link.Endpoints()[0], "http://")
	open, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer open.Close()

	link.Refuse()
	requireClosed(t, open, "a connection open before Refuse")
	fresh, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer fresh.Close()
	requireClosed(t, fresh, "a connection made after Refuse")

	link.Heal()
	_, err = link.Client().Put(testCtx(t), "/k", "v")
	require.NoError(t, err)
}

// A slow link adds its latency each way: a call through it takes at least
// twice the delay (no upper bound: the machine may be busy).
func TestLinkSlowAddsLatency(t *testing.T) {
	const d = 100 * time.Millisecond
	m := etcdtest.Start(t)
	link := m.Link()
	cli := link.Client()
	ctx := testCtx(t)
	_, err := cli.Put(ctx, "/k", "v")
	require.NoError(t, err)

	link.Slow(d)
	for range 3 {
		start := time.Now()
		_, err := cli.Get(ctx, "/k")
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 2*d)
	}
	link.Slow(0)
	_, err = cli.Get(ctx, "/k")
	require.NoError(t, err)
}

// A paused link holds the bytes on an open connection: the call waits and
// the member has not seen it; at the heal they arrive and the call
// returns.
func TestLinkPauseHoldsThenReleases(t *testing.T) {
	m := etcdtest.Start(t)
	link := m.Link()
	cli := link.Client()
	ctx := testCtx(t)
	_, err := cli.Put(ctx, "/before", "v")
	require.NoError(t, err)

	link.Pause()
	done := make(chan error, 1)
	go func() {
		_, err := cli.Put(ctx, "/paused", "v")
		done <- err
	}()
	require.Eventually(t, func() bool { return link.Held() > 0 }, 10*time.Second, 5*time.Millisecond,
		"the write never reached the link")
	requireAbsent(t, m, "/paused", "a paused link let a write through")
	select {
	case err := <-done:
		t.Fatalf("the write returned (%v) while its bytes were held", err)
	default:
	}

	link.Heal()
	require.NoError(t, <-done)
	resp, err := m.Client().Get(ctx, "/paused")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "the held write arrived at the heal")
}

// The link outlives a member's restart, and closes with the member: its
// client is closed and its port no longer accepts.
func TestLinkAcrossRestartAndClose(t *testing.T) {
	m, err := etcdtest.NewMember()
	require.NoError(t, err)
	defer m.Close()
	link := m.Link()
	ctx := testCtx(t)
	_, err = link.Client().Put(ctx, "/k", "v")
	require.NoError(t, err)

	require.NoError(t, m.Restart())
	require.Same(t, link, m.Link())
	resp, err := link.Client().Get(ctx, "/k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)

	m.Close()
	require.Error(t, link.Client().Ctx().Err(), "the link's client is closed")
	_, err = net.Dial("tcp", strings.TrimPrefix(link.Endpoints()[0], "http://"))
	require.Error(t, err, "the link's port is closed")
}
