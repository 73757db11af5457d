package etcdlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

func requireOpen(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(why)
	default:
	}
}

func requireClosed(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

func TestLostWhenRevokedElsewhere(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 5*time.Second)
	require.NoError(t, err)
	seen := make(chan int64, 100)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	lost := etcdlease.LostWithProgress(wctx, s, g, func(rev int64) { seen <- rev })

	// Extending, and moving the key to a longer etcd lease (a put that
	// keeps the create revision), keep the term.
	_, err = s.Extend(ctx, g, 5*time.Second)
	require.NoError(t, err)
	_, err = s.Extend(ctx, g, 7*time.Second)
	require.NoError(t, err)
	kv, err := cli.Get(ctx, s.Key("singular"))
	require.NoError(t, err)
	require.Greater(t, kv.Kvs[0].ModRevision, int64(g.Token), "the key was not moved to a longer lease")
	for rev := int64(0); rev < kv.Kvs[0].ModRevision; {
		select {
		case rev = <-seen:
		case <-ctx.Done():
			t.Fatal("the watcher never saw the relet")
		}
	}
	requireOpen(t, lost, "Lost closed while the term was held")

	other := newEtcdStore(t, cli, "/"+t.Name()+"/")
	require.NoError(t, other.Revoke(ctx, g))
	requireClosed(t, lost, "Lost stayed open after the term was revoked")
}

func TestLostWhenExpired(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", time.Second)
	require.NoError(t, err)
	requireClosed(t, s.Lost(ctx, g), "Lost stayed open after the term expired")
}

// A term that ended before the watch starts, with its history compacted
// away, is still reported: the watch falls back to reading the key.
func TestLostAfterCompaction(t *testing.T) {
	t.Parallel()
	s, cli, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Revoke(ctx, g))
	b, err := s.Claim(ctx, "singular", "b", 5*time.Second)
	require.NoError(t, err)
	_, err = cli.Compact(ctx, int64(b.Token))
	require.NoError(t, err)
	requireClosed(t, s.Lost(ctx, g), "Lost stayed open for a compacted, ended term")
}

// Cancelling ctx ends the watch (goleak checks its goroutine is gone) and
// leaves the channel open: a cancelled watch says nothing about the term.
func TestLostStopsWithContext(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 5*time.Second)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	lost := s.Lost(wctx, g)
	stop()
	requireOpen(t, lost, "a cancelled watch must not report the term lost")
}

// Closing the client ends the watch too (goleak checks its goroutine is
// gone) without reporting the term lost.
func TestLostStopsWithClient(t *testing.T) {
	t.Parallel()
	cli := newClient(t, etcdtest.Start(t).Endpoints()...)
	s := newEtcdStore(t, cli, "/"+t.Name()+"/")
	ctx := testCtx(t)
	g, err := s.Claim(ctx, "singular", "a", 5*time.Second)
	require.NoError(t, err)
	// A ctx that never ends: only the closed client can stop the watch.
	lost := s.Lost(context.Background(), g)
	require.NoError(t, cli.Close())
	requireOpen(t, lost, "a closed client must not report the term lost")
}
