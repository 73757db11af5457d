package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// A member outside a test (an Example, or a TestMain sharing one member
// between tests): stopped as a crash would stop it and restarted, it keeps
// its data and its address, and its client carries on.
func ExampleNewMember() {
	m, err := etcdtest.NewMember()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	ctx := context.Background()
	cli := m.Client()
	if _, err := cli.Put(ctx, "/config", "v1"); err != nil {
		fmt.Println(err)
		return
	}

	m.Stop()
	if err := m.Restart(); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cli.Get(ctx, "/config")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(resp.Kvs[0].Value))
	// Output: v1
}

// A partition rerun against your own tracker settings, judged by the
// history checker: tracker a reaches etcd through the member's Link,
// tracker b directly. The link is cut for longer than a's lease: a answers
// Unknown (ErrRenewalFailed) — it cannot know — and never "not leader",
// b takes over once etcd has expired a's term, and healed, a learns it.
// Every answer is recorded; Verify finds no two promises at one instant.
func ExampleLink() {
	etcd, err := etcdtest.NewMember()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	link := etcd.Link()

	// Your own settings go here.
	track := func(cli *clientv3.Client, holder string) *lease.Tracker {
		store, err := etcdlease.NewStore(cli, "/example/")
		if err != nil {
			panic(err)
		}
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: holder,
			Duration: 500 * time.Millisecond})
		if err != nil {
			panic(err)
		}
		return tr
	}
	var rec history.Recorder
	type answer struct {
		st  lease.Status
		err error
	}
	check := func(node string, tr *lease.Tracker) answer {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		asked := time.Now()
		st, err := tr.Check(ctx, 0)
		rec.Record(history.Answer{Node: node, Call: history.CallCheck, Status: st, Err: err,
			Asked: asked, Returned: time.Now()})
		return answer{st, err}
	}
	var a, b *lease.Tracker
	// until checks a (and b, once it runs) every 20 ms until done says
	// so, for at most 20 s.
	until := func(done func(a, b answer) bool) bool {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			x, y := check("a", a), answer{}
			if b != nil {
				y = check("b", b)
			}
			if done(x, y) {
				return true
			}
			<-time.After(20 * time.Millisecond)
		}
		return false
	}

	a = track(link.Client(), "a")
	defer a.Close()
	var tokenA uint64
	fmt.Println("a holds the lease:", until(func(x, _ answer) bool {
		tokenA = x.st.Token
		return x.st.State == lease.Held
	}))
	b = track(etcd.Client(), "b")
	defer b.Close()

	link.Cut()
	var unknown, notLeader bool
	var tokenB uint64
	fmt.Println("cut; b takes over:", until(func(x, y answer) bool {
		unknown = unknown || x.st.State == lease.Unknown && errors.Is(x.err, lease.ErrRenewalFailed)
		notLeader = notLeader || errors.Is(x.err, lease.ErrNotLeader)
		tokenB = y.st.Token
		return y.st.State == lease.Held && unknown
	}), "with a larger token:", tokenB > tokenA)
	fmt.Println("meanwhile a answered Unknown:", unknown, "and not leader:", notLeader)

	link.Heal()
	var holder string
	fmt.Println("healed; a learns it:", until(func(x, _ answer) bool {
		var nl *lease.NotLeaderError
		if errors.As(x.err, &nl) {
			holder = nl.Holder
		}
		return holder != ""
	}), "held by", holder)
	fmt.Println("violations:", rec.Verify())
	// Output:
	// a holds the lease: true
	// cut; b takes over: true with a larger token: true
	// meanwhile a answered Unknown: true and not leader: false
	// healed; a learns it: true held by b
	// violations: []
}
