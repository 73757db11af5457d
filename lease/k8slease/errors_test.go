package k8slease_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// An API server that answers 503 leaves a call ambiguous: the Store says so
// with lease's own class — a *leasestore.CallError matching leasestore.ErrUnconfirmed
// and naming the namespace — not a class of its own. Nil options are
// ignored; the store logs nothing for a call that changed nothing, and
// nothing once its calls have returned (it has no goroutine of its own).
func TestUnavailableAPIServerIsLeaseUnconfirmed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cli, err := coordinationv1client.NewForConfig(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	logs := logtest.New()
	s, err := k8slease.NewStore(cli, "team-a", nil, k8slease.WithLogger(logs.Logger()), nil)
	require.NoError(t, err, "nil options are ignored")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Claim(ctx, "leader", "a", time.Second)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
	require.NotErrorIs(t, err, leasestore.ErrNotSent)
	var ce *leasestore.CallError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, leasestore.OpClaim, ce.Op)
	require.Equal(t, "leader", ce.Name)
	require.Contains(t, err.Error(), `k8slease namespace "team-a": claim lease "leader" for "a" unconfirmed`)
	require.Equal(t, leasestore.Report{Claim: leasestore.Calls{Ambiguous: 1}}, s.StoreReport())
	logs.Seal(t)
	require.Empty(t, logs.Records())
}
