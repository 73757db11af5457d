package etcdlease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
)

// Claims started together go out in batches of nested transactions; more
// than one batch's worth all succeed, each key on the one session lease.
func TestSessionStoreClaimStorm(t *testing.T) {
	_, cli := startSingle(t)
	s := newSessionStore(t, cli, "/storm/", 10*time.Second)
	ctx := testCtx(t)
	const n = 300
	grants := make([]lease.Grant, n)
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

// A claim whose ctx has ended is not sent: its error says so, and it is
// still an unconfirmed error to the tracker.
func TestSessionStoreClaimNotSent(t *testing.T) {
	_, cli := startSingle(t)
	s := newSessionStore(t, cli, "/notsent/", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, "singular", "a", time.Second)
	require.ErrorIs(t, err, etcdlease.ErrNotSent)
	require.ErrorIs(t, err, etcdlease.ErrUnconfirmed)
	require.ErrorIs(t, err, context.Canceled)
	resp, err := cli.Get(testCtx(t), "/notsent/singular")
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, "a claim not sent put nothing")
}

// Close stops the keep-alive: the keys stay until the TTL runs out, or go
// at once WithRevokeOnClose. Calls after Close are unconfirmed.
func TestSessionStoreClose(t *testing.T) {
	_, cli := startSingle(t)
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
			_, err = s.Extend(ctx, g, time.Second)
			require.ErrorIs(t, err, etcdlease.ErrUnconfirmed)
			_, err = s.Claim(ctx, "other", "a", time.Second)
			require.ErrorIs(t, err, etcdlease.ErrUnconfirmed)
		})
	}
}

func TestNewSessionStoreRejectsBadArguments(t *testing.T) {
	_, cli := startSingle(t)
	for _, c := range []struct {
		name   string
		cli    *clientv3.Client
		prefix string
		ttl    time.Duration
	}{
		{"nil client", nil, "/p/", time.Second},
		{"empty prefix", cli, "", time.Second},
		{"zero ttl", cli, "/p/", 0},
	} {
		_, err := etcdlease.NewSessionStore(c.cli, c.prefix, c.ttl)
		require.ErrorIs(t, err, jujuerrors.NotValid, c.name)
	}
}
