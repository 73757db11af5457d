package apiservertest

import (
	"testing"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// TestStoreContract runs the contract every leasestore.Store keeps against the
// real API server. The API server does not expire Leases — the claimant's
// clock decides when a record has gone unchanged long enough — so each
// subtest's store runs on a testclock, and Advance is instant.
func TestStoreContract(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
		clk := testclock.NewClock(time.Now())
		return leasetest.Harness{
			Store:   newStore(t, cs, ns, k8slease.WithClock(clk)),
			Advance: func(d time.Duration) { clk.Advance(d) },
			Term:    time.Second, // leaseDurationSeconds has whole seconds
		}
	})
}
