package etcdlease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// handOverDuration is the lease of the hand-over benchmarks: trackers
// claim for 2×Duration = 2 s, etcd's Election campaigns on a 2 s session.
const handOverDuration = time.Second

// reportGaps reports the p50 and max of gaps in milliseconds.
func reportGaps(b *testing.B, gaps []time.Duration) {
	slices.Sort(gaps)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(gaps[len(gaps)/2]), "p50-ms")
	b.ReportMetric(ms(gaps[len(gaps)-1]), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGracefulHandOver measures the graceful gap — the leader starts
// its release (Close with ReleaseOnClose; Resign for the Election) → the
// waiting follower leads — on one embedded etcd, for both stores at the
// defaults and for etcd's own concurrency.Election (Resign → the next
// Campaign returns). Each op is one hand-over; run with -benchtime=24x.
// The follower has waited 0 or 200 ms when the leader releases: etcd
// syncs a watch that starts at a past revision every 100 ms, as a fresh
// Campaign's does.
func BenchmarkGracefulHandOver(b *testing.B) {
	m := etcdtest.Start(b)
	clis := []*clientv3.Client{m.Client(), newClient(b, m.Endpoints()...)}
	for _, waited := range []time.Duration{0, 200 * time.Millisecond} {
		b.Run(fmt.Sprintf("waited=%v", waited), func(b *testing.B) {
			benchHandOver(b, clis, waited)
		})
	}
}

func benchHandOver(b *testing.B, clis []*clientv3.Client, waited time.Duration) {
	for _, kind := range storeKinds {
		b.Run(kind.name, func(b *testing.B) {
			prefix := fmt.Sprintf("/bench/handover/%s/%d/", kind.name, time.Now().UnixNano())
			cfg := func(i int) lease.Config {
				return lease.Config{
					Store: kind.make(b, clis[i%2], prefix, 2*handOverDuration), Name: "h",
					Holder: fmt.Sprintf("n%d", i), Duration: handOverDuration, ReleaseOnClose: true, Margin: slowTimer,
				}
			}
			leader := benchTracker(b, cfg(0))
			awaitState(b, leader, lease.Held)
			var gaps []time.Duration
			for i := 1; b.Loop(); i++ {
				f := benchTracker(b, cfg(i))
				awaitState(b, f, lease.NotHeld)
				<-time.After(waited)
				start := time.Now()
				if err := leader.Close(); err != nil {
					b.Fatal(err)
				}
				awaitState(b, f, lease.Held)
				gaps = append(gaps, time.Since(start))
				leader = f
			}
			reportGaps(b, gaps)
		})
	}
	b.Run("Election", func(b *testing.B) {
		ctx := context.Background()
		prefix := fmt.Sprintf("/bench/election/%d/", time.Now().UnixNano())
		campaign := func(i int) (*concurrency.Election, *concurrency.Session, <-chan error) {
			sess, err := concurrency.NewSession(clis[i%2], concurrency.WithTTL(int(2*handOverDuration/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			e := concurrency.NewElection(sess, prefix)
			done := make(chan error, 1)
			go func() { done <- e.Campaign(ctx, fmt.Sprintf("n%d", i)) }()
			return e, sess, done
		}
		leader, lsess, done := campaign(0)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		var gaps []time.Duration
		for i := 1; b.Loop(); i++ {
			f, fsess, fdone := campaign(i)
			awaitCampaigning(b, clis[0], prefix, 2)
			<-time.After(waited)
			start := time.Now()
			if err := leader.Resign(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-fdone; err != nil {
				b.Fatal(err)
			}
			gaps = append(gaps, time.Since(start))
			lsess.Close()
			leader, lsess = f, fsess
		}
		lsess.Close()
		reportGaps(b, gaps)
	})
}

// BenchmarkWaitingFollower measures the calls per second a follower sends
// while another tracker leads: each op is one second of waiting (run with
// -benchtime=5x).
func BenchmarkWaitingFollower(b *testing.B) {
	m := etcdtest.Start(b)
	for _, kind := range storeKinds {
		b.Run(kind.name, func(b *testing.B) {
			prefix := fmt.Sprintf("/bench/follower/%s/%d/", kind.name, time.Now().UnixNano())
			cfg := func(cli *clientv3.Client, holder string) lease.Config {
				return lease.Config{
					Store: kind.make(b, cli, prefix, 2*handOverDuration), Name: "h",
					Holder: holder, Duration: handOverDuration, ReleaseOnClose: true, Margin: slowTimer,
				}
			}
			awaitState(b, benchTracker(b, cfg(m.Client(), "a")), lease.Held)
			fc := cfg(newClient(b, m.Endpoints()...), "b")
			awaitState(b, benchTracker(b, fc), lease.NotHeld)
			before := fc.Store.(leasestore.Reporter).StoreReport()
			start := time.Now()
			for b.Loop() {
				<-time.After(time.Second)
			}
			after := fc.Store.(leasestore.Reporter).StoreReport()
			calls := func(r leasestore.Report) uint64 {
				n := uint64(0)
				for _, c := range []leasestore.Calls{r.Claim, r.Extend, r.Revoke} {
					n += c.OK + c.Definitive + c.NotSent + c.Ambiguous
				}
				return n
			}
			b.ReportMetric(float64(calls(after)-calls(before))/time.Since(start).Seconds(), "calls/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchTracker returns a tracker closed at cleanup.
func benchTracker(b *testing.B, cfg lease.Config) *lease.Tracker {
	b.Helper()
	tr, err := lease.NewTracker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr
}

// awaitState follows tr's Current status until it is in state.
func awaitState(b *testing.B, tr *lease.Tracker, state lease.State) {
	b.Helper()
	deadline := time.After(20 * time.Second)
	for {
		st, changed := tr.Current()
		if st.State == state {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			b.Fatalf("%s: not %v within 20s (last %+v)", b.Name(), state, st)
		}
	}
}

// awaitCampaigning waits until n candidates' keys are under an election's
// prefix: the follower's Campaign has put its key and waits.
func awaitCampaigning(b *testing.B, cli *clientv3.Client, prefix string, n int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	if resp.Count >= n {
		return
	}
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			b.Fatal(err)
		}
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count >= n {
			return
		}
	}
	b.Fatalf("fewer than %d candidates under %q within 20s", n, prefix)
}
