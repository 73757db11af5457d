package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

func Example() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	cli := etcd.Client()
	ctx := context.Background()
	store, err := etcdlease.NewStore(cli, "/example/")
	if err != nil {
		fmt.Println(err)
		return
	}

	a, err := store.Claim(ctx, "singular", "unit-a", 1500*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s holds %q for %v (etcd grants whole seconds)\n", a.Holder, a.Name, a.Duration)

	_, err = store.Claim(ctx, "singular", "unit-b", time.Second)
	var held *leasestore.HeldError
	if errors.As(err, &held) {
		fmt.Printf("unit-b denied: held by %s\n", held.Holder)
	}

	a2, err := store.Extend(ctx, a, time.Second)
	fmt.Println("extended, same term:", err == nil && a2.Token == a.Token)

	fmt.Println("revoked:", store.Revoke(ctx, a) == nil)
	_, err = store.Extend(ctx, a, time.Second)
	fmt.Println("extend after revoke is definitive:", errors.Is(err, leasestore.ErrNotHeld))

	b, err := store.Claim(ctx, "singular", "unit-b", time.Second)
	fmt.Println("unit-b holds it with a larger token:", err == nil && b.Token > a.Token)
	// Output:
	// unit-a holds "singular" for 2s (etcd grants whole seconds)
	// unit-b denied: held by unit-a
	// extended, same term: true
	// revoked: true
	// extend after revoke is definitive: true
	// unit-b holds it with a larger token: true
}

// The set-up against a cluster: a client that knows every member, one
// store, one tracker per lease, and leader work whose every write to etcd
// carries its term's fencing token. (Not run: it needs your etcd.)
func Example_cluster() {
	cli, err := clientv3.New(clientv3.Config{
		// Every member: a call fails over to the surviving quorum.
		Endpoints:   []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close() // after the trackers

	store, err := etcdlease.NewStore(cli, "/myapp/leases/") // an error only for bad arguments
	if err != nil {
		log.Fatal(err)
	}
	tr, err := lease.NewTracker(lease.Config{
		Store:    store,
		Name:     "singular",
		Holder:   "unit-0",
		Duration: 30 * time.Second, // etcd grants whole seconds: 2×Duration rounded up
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()

	// Lead runs the leader work each time this process comes to hold the
	// lease; its ctx ends as soon as the term can no longer be promised.
	err = tr.Lead(context.Background(), func(ctx context.Context, st lease.Status) error {
		resp, err := cli.Txn(ctx).
			If(store.Fence("singular", st.Token)).
			Then(clientv3.OpPut("/myapp/config", "v2")).
			Commit()
		switch {
		case err != nil:
			return err // ambiguous, as any etcd write: it may or may not have been applied
		case !resp.Succeeded:
			return nil // our term is over (another holder took the lease): nothing was written
		}
		<-ctx.Done() // lead until the term ends
		return ctx.Err()
	})
	log.Print(err)
}

// A Tracker on etcd: the leader is told Held, the other party is told
// definitively who leads.
func Example_tracker() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	cli := etcd.Client()
	ctx := context.Background()
	store, err := etcdlease.NewStore(cli, "/example/")
	if err != nil {
		fmt.Println(err)
		return
	}

	leader, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-a", Duration: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leader.Close()
	st, err := leader.Check(ctx, time.Second)
	fmt.Println(st.State, st.Holder, err)

	other, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-b", Duration: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer other.Close()
	st, err = other.Check(ctx, time.Second)
	fmt.Println(st.State, st.Holder, errors.Is(err, lease.ErrNotLeader))
	// Output:
	// held unit-a <nil>
	// not-held unit-a true
}

// A SessionStore for a controller that leads many applications: one etcd
// lease carries every key, so renewing a thousand terms sends nothing but
// the session's one keep-alive every TTL/3.
func ExampleNewSessionStore() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	cli := etcd.Client()
	ctx := context.Background()
	// The trackers claim 2 × Duration = 2 s: a TTL of three times that.
	store, err := etcdlease.NewSessionStore(cli, "/example/apps/", 6*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // the keys then expire with the TTL

	var trackers []*lease.Tracker
	for _, app := range []string{"mysql", "wordpress", "haproxy"} {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: app, Holder: "controller-0", Duration: time.Second})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer tr.Close()
		trackers = append(trackers, tr)
	}
	for _, tr := range trackers {
		st, err := tr.Check(ctx, time.Second)
		fmt.Println(st.State, st.Holder, err)
	}
	// Output:
	// held controller-0 <nil>
	// held controller-0 <nil>
	// held controller-0 <nil>
}

// Fencing a write with the term's token: a leader froze (its renewals
// stopped, as a paused process's would) and etcd expired its term; another
// tracker took over. The frozen leader wakes up and writes under the token
// it still has: fenced, the write is refused (unfenced, it would have
// overwritten the new leader's data).
func ExampleStore_Fence() {
	etcd, err := etcdtest.NewMember()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	cli := etcd.Client()
	ctx := context.Background()
	store, err := etcdlease.NewStore(cli, "/example/leases/")
	if err != nil {
		fmt.Println(err)
		return
	}
	// write puts the config in one transaction with the fence of term token.
	write := func(token uint64, value string) bool {
		resp, err := cli.Txn(ctx).
			If(store.Fence("singular", token)).
			Then(clientv3.OpPut("/example/config", value)).
			Commit()
		return err == nil && resp.Succeeded
	}

	a, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-a", Duration: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := a.Check(ctx, 0)
	fmt.Println("unit-a", st.State, err)
	fmt.Println("unit-a writes while it leads:", write(st.Token, "from unit-a"))
	a.Close() // unit-a freezes: no more renewals; etcd expires its term

	b, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-b", Duration: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	bst, changed := b.Current()
	for bst.State != lease.Held {
		<-changed
		bst, changed = b.Current()
	}
	fmt.Println("unit-b", bst.State)
	fmt.Println("unit-a wakes up and writes:", write(st.Token, "late, from unit-a"))
	fmt.Println("unit-b writes:", write(bst.Token, "from unit-b"))
	resp, err := cli.Get(ctx, "/example/config")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(resp.Kvs[0].Value))
	// Output:
	// unit-a held <nil>
	// unit-a writes while it leads: true
	// unit-b held
	// unit-a wakes up and writes: false
	// unit-b writes: true
	// from unit-b
}

// A store counts its calls by the class of their answer, as every
// leasestore.Reporter does, for a status page or a metrics collector.
func ExampleStore_StoreReport() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	store, err := etcdlease.NewStore(etcd.Client(), "/example/")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	g, _ := store.Claim(ctx, "singular", "unit-a", time.Second)
	_, _ = store.Claim(ctx, "singular", "unit-b", time.Second) // held: definitive
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = store.Extend(cancelled, g, time.Second) // not sent
	_ = store.Revoke(ctx, g)

	r := store.StoreReport()
	fmt.Printf("claim %+v\nextend %+v\nrevoke %+v\nin flight %d\n", r.Claim, r.Extend, r.Revoke, r.InFlight)
	// Output:
	// claim {OK:1 Definitive:1 NotSent:0 Ambiguous:0}
	// extend {OK:0 Definitive:0 NotSent:1 Ambiguous:0}
	// revoke {OK:1 Definitive:0 NotSent:0 Ambiguous:0}
	// in flight 0
}

// A SessionStore with a logger logs its session's transitions, not its
// calls: here, the session its first claim granted.
func ExampleWithLogger() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "session" {
				return slog.Attr{} // they differ from run to run
			}
			return a
		},
	}))
	store, err := etcdlease.NewSessionStore(etcd.Client(), "/example/", 30*time.Second, etcdlease.WithLogger(logger))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	ctx := context.Background()
	g, _ := store.Claim(ctx, "singular", "unit-a", 10*time.Second)
	for range 3 {
		_, _ = store.Extend(ctx, g, 10*time.Second) // no record per call
	}
	// Output:
	// level=INFO msg="etcd session granted" prefix=/example/ ttl=30s
}

// One controller of an HA group, the lease's holder, records each upgrade
// step it has run under its fencing token; a deposed holder's record is
// refused. Every controller reads the same log.
func ExampleStore_RecordStep() {
	etcd, err := etcdtest.NewMember() // a throw-away etcd in this process
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	ctx := context.Background()
	store, err := etcdlease.NewStore(etcd.Client(), "/example/steps/")
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := store.Claim(ctx, "upgrade", "unit-a", time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}

	if err := store.RecordStep(ctx, "upgrade", a.Token, "4.0.1/schema-7"); err != nil {
		return // ambiguous, or the term is over: a successor re-runs the step
	}
	store.Revoke(ctx, a)                                       // a hands over ...
	b, _ := store.Claim(ctx, "upgrade", "unit-b", time.Second) // ... to b
	err = store.RecordStep(ctx, "upgrade", a.Token, "4.0.1/schema-8")
	fmt.Println("a's record refused, term over:", errors.Is(err, leasestore.ErrNotHeld))
	fmt.Println(store.RecordStep(ctx, "upgrade", b.Token, "4.0.1/schema-8"))

	steps, err := store.StepsDone(ctx, "upgrade")
	fmt.Println(steps, err)
	// Output:
	// a's record refused, term over: true
	// <nil>
	// [4.0.1/schema-7 4.0.1/schema-8] <nil>
}
