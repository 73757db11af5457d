package lease_test

import (
	"fmt"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// What a Config promises, as numbers and in words: a 2 s Duration with
// every other timing setting at its default, then a longer lease with a
// wider Margin (it tolerates more clock drift and a longer outage, and
// takes longer to take over after a crash), then the first with a store
// that tells waiting followers of a release (MemStore, a ReleaseWatcher).
func ExampleConfig_Timing() {
	t := lease.Config{Duration: 2 * time.Second}.Timing()
	fmt.Println(t)
	fmt.Printf("outage %v, crash takeover %v, graceful %v, drift %.0f%%, %.0f renewals/s per 1,000 leases, %.2f claims/s per follower\n",
		t.Outage, t.CrashTakeover, t.GracefulTakeover, 100*t.ClockDrift, t.RenewRate, t.ClaimRate)

	fmt.Println(lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}.Timing())
	fmt.Println(lease.Config{Duration: 2 * time.Second, Store: leasestore.NewMemStore(leasestore.MemStoreConfig{})}.Timing())
	// Output:
	// tolerates a store outage of 1.9s before answering Unknown; a crash takeover takes at most 4.2s, a graceful one at most 200ms; tolerates a clock 5% slower than the store's; 1,000 held leases cost 554 renewal calls/s, a waiting follower 5.26 claim calls/s
	// outage 1.9s, crash takeover 4.2s, graceful 200ms, drift 5%, 554 renewals/s per 1,000 leases, 5.26 claims/s per follower
	// tolerates a store outage of 9s before answering Unknown; a crash takeover takes at most 21s, a graceful one at most 1s; tolerates a clock 10% slower than the store's; 1,000 held leases cost 117 renewal calls/s, a waiting follower 1.05 claim calls/s
	// tolerates a store outage of 1.9s before answering Unknown; a crash takeover takes at most 4s, a graceful one at most 1ms; tolerates a clock 5% slower than the store's; 1,000 held leases cost 554 renewal calls/s, a waiting follower 0.263 claim calls/s
}
