package lease_test

import (
	"testing"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

func TestMemStoreContract(t *testing.T) {
	leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
		clk := testclock.NewClock(time.Unix(1_700_000_000, 0))
		return leasetest.Harness{
			Store:   lease.NewMemStore(clk),
			Advance: clk.Advance,
			Term:    time.Minute,
		}
	})
}
