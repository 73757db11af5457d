package etcdlease_test

import (
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// TestStoreContract runs the contract every lease.Store keeps (the same one
// MemStore runs) against one real single-member etcd. Each subtest uses
// lease names of its own, so they share the server.
func TestStoreContract(t *testing.T) {
	_, cli := startSingle(t)
	store := etcdlease.NewStore(cli, "/contract/")
	leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
		return leasetest.Harness{
			Store: store,
			// etcd expires leases on its own wall clock: let real time pass.
			Advance: func(d time.Duration) { <-time.After(d) },
			Term:    time.Second,
		}
	})
}
