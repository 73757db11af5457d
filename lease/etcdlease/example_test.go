package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
)

// exampleEtcd starts a throw-away single-member etcd on loopback and returns
// a client of it and a func that stops both.
func exampleEtcd() (*clientv3.Client, func(), error) {
	dir, err := os.MkdirTemp("", "etcdlease-example")
	if err != nil {
		return nil, nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.InitialCluster = cfg.Name + "=" + loopback.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	<-e.Server.ReadyNotify()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{e.Clients[0].Addr().String()}, Logger: zap.NewNop(),
	})
	if err != nil {
		e.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return cli, func() { cli.Close(); e.Close(); os.RemoveAll(dir) }, nil
}

func Example() {
	cli, stop, err := exampleEtcd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
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
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("unit-b denied: held by %s\n", held.Holder)
	}

	a2, err := store.Extend(ctx, a, time.Second)
	fmt.Println("extended, same term:", err == nil && a2.Token == a.Token)

	fmt.Println("revoked:", store.Revoke(ctx, a) == nil)
	_, err = store.Extend(ctx, a, time.Second)
	fmt.Println("extend after revoke is definitive:", errors.Is(err, lease.ErrNotHeld))

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

// A Tracker on etcd: the leader is told Held, the other party is told
// definitively who leads.
func Example_tracker() {
	cli, stop, err := exampleEtcd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
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
	cli, stop, err := exampleEtcd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
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
