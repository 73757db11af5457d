package etcdlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
)

func TestClaimExtendRevoke(t *testing.T) {
	_, cli := startSingle(t)
	s := etcdlease.NewStore(cli, "/test/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	g, err := s.Claim(ctx, "singular", "a", 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, g.Duration)
	require.NotZero(t, g.Token)

	_, err = s.Claim(ctx, "singular", "b", time.Second)
	var held *lease.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "a", held.Holder)
	require.ErrorIs(t, err, lease.ErrHeld)

	g2, err := s.Extend(ctx, g, time.Second)
	require.NoError(t, err)
	require.Equal(t, g.Token, g2.Token)
	require.Equal(t, 2*time.Second, g2.Duration)

	require.NoError(t, s.Revoke(ctx, g))
	err = s.Revoke(ctx, g)
	require.ErrorIs(t, err, lease.ErrNotHeld)
	_, err = s.Extend(ctx, g, time.Second)
	require.ErrorIs(t, err, lease.ErrNotHeld)
	require.False(t, errors.Is(err, etcdlease.ErrUnconfirmed))

	g3, err := s.Claim(ctx, "singular", "b", time.Second)
	require.NoError(t, err)
	require.Greater(t, g3.Token, g.Token)
}
