package upgrade_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/upgrade"
)

// Two controllers upgrade once for their group: the lease's holder runs
// the steps under its fencing token (here claimed by hand; with a
// lease.Tracker, call Lead from its Lead function with st.Token), and the
// other's gate opens when it reads them recorded in the StepLog.
func ExampleGate_Group() {
	ctx := context.Background()
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{}) // a StepLog, fenced by its tokens
	steps := []upgrade.Step{
		{Name: "4.0.1/schema-7", Run: func(ctx context.Context, token uint64) error {
			fmt.Println("schema-7 under token", token)
			return nil
		}},
		{Name: "4.0.1/reindex", Run: func(ctx context.Context, token uint64) error {
			fmt.Println("reindex under token", token)
			return nil
		}},
	}
	var gates []*upgrade.Gate
	var groups []*upgrade.Group
	for range 2 {
		g := upgrade.NewGate(upgrade.GateConfig{})
		grp, err := g.Group(upgrade.GroupConfig{Log: store, Lease: "upgrade-leader", Steps: steps, Poll: 10 * time.Millisecond})
		if err != nil {
			panic(err)
		}
		gates, groups = append(gates, g), append(groups, grp)
	}
	waited := make(chan error, 2)
	for _, grp := range groups {
		go func() { waited <- grp.Wait(ctx) }()
	}

	grant, _ := store.Claim(ctx, "upgrade-leader", "controller-0", time.Minute)
	// tr.Lead(ctx, func(ctx context.Context, st lease.Status) error { return groups[0].Lead(ctx, st.Token) })
	if err := groups[0].Lead(ctx, grant.Token); err != nil {
		fmt.Println("lead:", err)
	}
	fmt.Println(<-waited, <-waited, gates[0].Phase(), gates[1].Phase())
	// Output:
	// schema-7 under token 1
	// reindex under token 1
	// <nil> <nil> complete complete
}

// A server that drains: once the drain signal closes (a board's
// Draining()) and the grace has passed, new calls get the upgrade wire's
// 503 with Connection: close (a GOAWAY on HTTP/2), and retrying clients
// wait, or, told a ready peer can serve, may go there.
func ExampleGate_Drain() {
	ctx := context.Background()
	drain := make(chan struct{})
	g := upgrade.NewGate(upgrade.GateConfig{PeerReady: func() bool { return true }})
	g.Complete()
	h := upgrade.Middleware(g, nil)(http.NotFoundHandler())
	drained := make(chan error, 1)
	go func() { drained <- g.Drain(ctx, drain, 0) }() // e.g. 5 * time.Second, so that load balancers see readiness fall first

	close(drain)
	fmt.Println(<-drained, g.Phase())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	fmt.Println(rec.Code, rec.Header().Get("Connection"))
	fmt.Print(rec.Body.String())
	// Output:
	// <nil> draining
	// 503 close
	// {"code":"upgrade-in-progress","phase":"draining","message":"upgrade in progress (draining before a restart); call not executed; a ready peer can serve it","peer_ready":true}
}

// A controller's own client, in the server's process, wakes when its gate
// completes instead of sleeping out the hour the gate asks remote clients
// to wait.
func ExampleWithWake() {
	g := upgrade.NewGate(upgrade.GateConfig{})
	_ = g.SetRetryAfter(time.Hour)
	start := time.Now()
	err := upgrade.Retry(context.Background(), func(context.Context) error { return g.Admit(false) },
		upgrade.WithWake(g.Completed),
		upgrade.WithNotify(func(int, error, time.Duration) { go g.Complete() })) // the steps end meanwhile
	fmt.Println(err, time.Since(start) < time.Minute)
	// Output:
	// <nil> true
}
