package etcdlease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

// BenchmarkCrashHandOver measures the crash gap — the leader's process
// stops without releasing (its etcd client is closed: no revoke, no more
// keep-alives) → the waiting follower leads — on one embedded etcd, for
// both stores at the defaults and for etcd's own concurrency.Election on
// a session of the same TTL as the trackers' terms. The gap is the rest of
// the leader's etcd lease, which depends on when it last renewed, plus
// the follower's claim. Each op is one hand-over; run with -benchtime=20x.
func BenchmarkCrashHandOver(b *testing.B) {
	m := etcdtest.Start(b)
	for _, kind := range storeKinds {
		b.Run(kind.name, func(b *testing.B) {
			prefix := fmt.Sprintf("/bench/crash/%s/%d/", kind.name, time.Now().UnixNano())
			start := func(i int) (*lease.Tracker, *clientv3.Client) {
				cli := newClient(b, m.Endpoints()...)
				return benchTracker(b, lease.Config{
					Store: kind.make(b, cli, prefix, 2*handOverDuration), Name: "h",
					Holder: fmt.Sprintf("n%d", i), Duration: handOverDuration, Margin: slowTimer,
				}), cli
			}
			leader, lcli := start(0)
			awaitState(b, leader, lease.Held)
			var gaps []time.Duration
			for i := 1; b.Loop(); i++ {
				f, fcli := start(i)
				awaitState(b, f, lease.NotHeld)
				crashed := time.Now()
				lcli.Close()
				awaitState(b, f, lease.Held)
				gaps = append(gaps, time.Since(crashed))
				leader.Close()
				leader, lcli = f, fcli
			}
			reportGaps(b, gaps)
		})
	}
	b.Run("Election", func(b *testing.B) {
		ctx := context.Background()
		prefix := fmt.Sprintf("/bench/crash/election/%d/", time.Now().UnixNano())
		campaign := func(i int) (*clientv3.Client, <-chan error) {
			cli := newClient(b, m.Endpoints()...)
			sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(2*handOverDuration/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			e := concurrency.NewElection(sess, prefix)
			done := make(chan error, 1)
			go func() { done <- e.Campaign(ctx, fmt.Sprintf("n%d", i)) }()
			return cli, done
		}
		lcli, done := campaign(0)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		var gaps []time.Duration
		for i := 1; b.Loop(); i++ {
			fcli, fdone := campaign(i)
			awaitCampaigning(b, m.Client(), prefix, 2)
			crashed := time.Now()
			lcli.Close()
			if err := <-fdone; err != nil {
				b.Fatal(err)
			}
			gaps = append(gaps, time.Since(crashed))
			lcli = fcli
		}
		reportGaps(b, gaps)
	})
}
