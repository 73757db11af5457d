package etcdlease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// storeKind makes one of the package's two stores on a client, so that a
// test runs on both. A SessionStore gets a session TTL of three times term,
// the duration its trackers (or contract claims) ask for, as the
// SessionStore's doc asks.
type storeKind struct {
	name string
	make func(t testing.TB, cli *clientv3.Client, prefix string, term time.Duration) leasestore.Store
}

var storeKinds = []storeKind{
	{"Store", func(t testing.TB, cli *clientv3.Client, prefix string, _ time.Duration) leasestore.Store {
		return newEtcdStore(t, cli, prefix)
	}},
	{"SessionStore", func(t testing.TB, cli *clientv3.Client, prefix string, term time.Duration) leasestore.Store {
		return newSessionStore(t, cli, prefix, 3*term)
	}},
}

// newEtcdStore returns a Store, failing the test if NewStore does.
func newEtcdStore(t testing.TB, cli *clientv3.Client, prefix string, opts ...etcdlease.Option) *etcdlease.Store {
	t.Helper()
	s, err := etcdlease.NewStore(cli, prefix, opts...)
	require.NoError(t, err)
	return s
}

// newSessionStore returns a SessionStore closed at cleanup (before the
// client: cleanups run last-in first-out).
func newSessionStore(t testing.TB, cli *clientv3.Client, prefix string, ttl time.Duration, opts ...etcdlease.Option) *etcdlease.SessionStore {
	t.Helper()
	s, err := etcdlease.NewSessionStore(cli, prefix, ttl, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// forEachStore runs test once per store kind, as a subtest; one after the
// other, as a test that shares one etcd between them, or that depends on
// timing under load (the fault tests), needs.
func forEachStore(t *testing.T, test func(t *testing.T, kind storeKind)) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) { test(t, kind) })
	}
}

// forEachStoreParallel is forEachStore for a test whose subtests each
// start an etcd of their own: they run in parallel (t.Parallel).
func forEachStoreParallel(t *testing.T, test func(t *testing.T, kind storeKind)) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}

// TestStoreContract runs the contract every leasestore.Store keeps (the same one
// MemStore runs) against one real single-member etcd, for both stores. Each
// subtest uses lease names of its own, so they share the server.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	const term = time.Second
	forEachStore(t, func(t *testing.T, kind storeKind) {
		store := kind.make(t, cli, "/contract/"+kind.name+"/", term)
		leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
			return leasetest.Harness{
				Store: store,
				// etcd expires leases on its own wall clock: let real time pass.
				Advance: func(d time.Duration) { <-time.After(d) },
				Term:    term,
			}
		})
	})
}
