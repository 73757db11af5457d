package k8slease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// unusedClient is a real client for a server that is never called: the
// calls below fail validation before they send anything.
func unusedClient(t *testing.T) coordinationv1client.CoordinationV1Interface {
	t.Helper()
	cli, err := coordinationv1client.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	require.NoError(t, err)
	return cli
}

func TestNewStoreRejectsBadInput(t *testing.T) {
	var typedNil *coordinationv1client.CoordinationV1Client
	for _, c := range []struct {
		name string
		cli  coordinationv1client.CoordinationV1Interface
		ns   string
		want string
	}{
		{"nil client", nil, "default", "nil client"},
		{"typed nil client", typedNil, "default", "nil client"},
		{"empty namespace", unusedClient(t), "", `namespace ""`},
		{"namespace not a DNS label", unusedClient(t), "My_NS", `namespace "My_NS"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := k8slease.NewStore(c.cli, c.ns)
			require.Nil(t, s)
			require.Truef(t, jujuerrors.Is(err, jujuerrors.NotValid), "NewStore: %v, want NotValid", err)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestCallsRejectBadInput(t *testing.T) {
	s, err := k8slease.NewStore(unusedClient(t), "default")
	require.NoError(t, err)
	ctx := context.Background()
	good := leasestore.Grant{Name: "ok", Holder: "a", Token: 1, Duration: time.Second}
	with := func(f func(*leasestore.Grant)) leasestore.Grant { g := good; f(&g); return g }
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"claim, empty name", func() error { _, err := s.Claim(ctx, "", "a", time.Second); return err }, "empty lease name"},
		{"claim, name with a slash", func() error { _, err := s.Claim(ctx, "a/b", "a", time.Second); return err }, `lease name "a/b"`},
		{"claim, upper-case name", func() error { _, err := s.Claim(ctx, "Leader", "a", time.Second); return err }, `lease name "Leader"`},
		{"claim, empty holder", func() error { _, err := s.Claim(ctx, "ok", "", time.Second); return err }, "empty holder"},
		{"claim, zero duration", func() error { _, err := s.Claim(ctx, "ok", "a", 0); return err }, "duration 0s"},
		{"claim, duration beyond int32 seconds", func() error { _, err := s.Claim(ctx, "ok", "a", 1<<62); return err }, "duration"},
		{"extend, bad name", func() error {
			_, err := s.Extend(ctx, with(func(g *leasestore.Grant) { g.Name = "a b" }), time.Second)
			return err
		}, `lease name "a b"`},
		{"extend, token 0", func() error {
			_, err := s.Extend(ctx, with(func(g *leasestore.Grant) { g.Token = 0 }), time.Second)
			return err
		}, "grant's token"},
		{"extend, token beyond int32", func() error {
			_, err := s.Extend(ctx, with(func(g *leasestore.Grant) { g.Token = 1 << 40 }), time.Second)
			return err
		}, "grant's token"},
		{"extend, negative duration", func() error { _, err := s.Extend(ctx, good, -time.Second); return err }, "duration -1s"},
		{"revoke, bad name", func() error { return s.Revoke(ctx, with(func(g *leasestore.Grant) { g.Name = "" })) }, "empty lease name"},
		{"revoke, empty holder", func() error { return s.Revoke(ctx, with(func(g *leasestore.Grant) { g.Holder = "" })) }, "empty grant's holder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.Truef(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v, want NotValid", err)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestStoreReportCountsBadInput: a call refused for a bad argument is
// counted once, as leasestore.Store's classes count it (ambiguous: it is
// neither ErrHeld, ErrNotHeld nor ErrNotSent), and nothing stays in flight.
func TestStoreReportCountsBadInput(t *testing.T) {
	s, err := k8slease.NewStore(unusedClient(t), "default")
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.Claim(ctx, "Bad Name", "a", time.Second)
	require.Error(t, err)
	_, err = s.Extend(ctx, leasestore.Grant{Name: "ok", Holder: "a"}, time.Second)
	require.Error(t, err)
	require.Error(t, s.Revoke(ctx, leasestore.Grant{Name: "ok", Token: 1}))
	require.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{Ambiguous: 1},
		Extend: leasestore.Calls{Ambiguous: 1},
		Revoke: leasestore.Calls{Ambiguous: 1},
	}, s.StoreReport())
}

// TestRenewTimeMovesEverySecond: client-go reads renewTime to whole
// seconds, so every write must land in a later second than the one before.
func TestRenewTimeMovesEverySecond(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return tm
	}
	micro := func(s string) *metav1.MicroTime { m := metav1.NewMicroTime(at(s)); return &m }
	for _, c := range []struct {
		prev *metav1.MicroTime
		now  string
		want string
	}{
		{nil, "2026-01-01T00:00:05.123456789Z", "2026-01-01T00:00:05.123456Z"},                               // microseconds, as the API keeps
		{micro("2026-01-01T00:00:04.9Z"), "2026-01-01T00:00:05.1Z", "2026-01-01T00:00:05.1Z"},                // another second already
		{micro("2026-01-01T00:00:05.1Z"), "2026-01-01T00:00:05.7Z", "2026-01-01T00:00:06Z"},                  // same second: the next one
		{micro("2026-01-01T00:00:05Z"), "2026-01-01T00:00:05Z", "2026-01-01T00:00:06Z"},                      // exactly equal
		{micro("2026-01-01T00:00:09.5Z"), "2026-01-01T00:00:05Z", "2026-01-01T00:00:10Z"},                    // previous writer's clock ahead
		{micro("2026-01-01T00:00:05.999999Z"), "2026-01-01T00:00:06.000001Z", "2026-01-01T00:00:06.000001Z"}, // just past the second
	} {
		t.Run(fmt.Sprint(c.prev, "→", c.now), func(t *testing.T) {
			got := k8slease.RenewAfter(c.prev, at(c.now))
			require.True(t, got.Time.Equal(at(c.want)), "renewAfter(%v, %s) = %v, want %s", c.prev, c.now, got.Time, c.want)
			if c.prev != nil {
				require.True(t, got.Truncate(time.Second).After(c.prev.Truncate(time.Second)),
					"renewTime %v is in the second of the previous write %v: client-go would not see it", got.Time, c.prev.Time)
			}
		})
	}
}

// TestOnlyLeaseNotFoundIsGone: a 404 ends a term only when its status says
// this Lease object does not exist.
func TestOnlyLeaseNotFoundIsGone(t *testing.T) {
	leases := coordinationv1.Resource("leases")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"lease not found", apierrors.NewNotFound(leases, "leader"), true},
		{"wrapped lease not found", fmt.Errorf("get: %w", apierrors.NewNotFound(leases, "leader")), true},
		{"another lease not found", apierrors.NewNotFound(leases, "other"), false},
		{"namespace not found", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "leader"), false},
		{"no such API (404 without details)", apierrors.NewGenericServerResponse(404, "GET", leases, "", "404 page not found", 0, false), false},
		{"conflict", apierrors.NewConflict(leases, "leader", fmt.Errorf("rv")), false},
		{"server timeout", apierrors.NewServerTimeout(leases, "get", 1), false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false},
		{"nil", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, k8slease.IsGone(c.err, "leader"))
		})
	}
}
