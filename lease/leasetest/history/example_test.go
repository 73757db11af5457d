package history_test

import (
	"context"
	"fmt"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// Record each answer the trackers give, then ask whether they were safe.
// Trackers a and b share a store: one holds the lease, the other is told
// so. Tracker c has a store of its own — a store that lost its quorum,
// say — and is promised the lease too: Verify names both answers.
func Example() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var rec history.Recorder
	check := func(node string, tr *lease.Tracker) {
		asked := clk.Now()
		st, err := tr.Check(context.Background(), 0)
		rec.Record(history.Answer{Node: node, Call: history.CallCheck, Status: st, Err: err,
			Asked: asked, Returned: clk.Now()})
	}
	tracker := func(store leasestore.Store, holder string) *lease.Tracker {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: holder,
			Duration: 10 * time.Second, Clock: clk})
		if err != nil {
			panic(err)
		}
		return tr
	}
	shared := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	a := tracker(shared, "a")
	defer a.Close()
	check("a", a)
	b := tracker(shared, "b")
	defer b.Close()
	check("b", b)
	fmt.Println("violations:", len(rec.Verify()))

	c := tracker(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), "c")
	defer c.Close()
	check("c", c)
	for _, v := range rec.Verify() {
		fmt.Println(v)
	}
	// Output:
	// violations: 0
	// overlap: two terms promised for 19s: a check held token 1 until +19.000s [+0.000s, +0.000s]; c check held token 1 until +19.000s [+0.000s, +0.000s]
	// token-order: token 1 promised to two nodes: a check held token 1 until +19.000s [+0.000s, +0.000s]; c check held token 1 until +19.000s [+0.000s, +0.000s]
}
