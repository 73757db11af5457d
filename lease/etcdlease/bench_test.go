package etcdlease_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// BenchmarkClaim measures claims per second against the embedded
// single-member etcd: each op claims a fresh lease name and revokes it (so
// etcd's lease count stays flat). The baseline beside it is a bare etcd Put
// on the same server, the cheapest write there is.
func BenchmarkClaim(b *testing.B) {
	cli := etcdtest.Start(b).Client()
	s := newEtcdStore(b, cli, "/bench/claim/")
	ctx := context.Background()

	b.Run("bare-put", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for i := 0; b.Loop(); i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("/bench/put/%d", i), "h"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
	})
	b.Run("claim", func(b *testing.B) {
		b.ReportAllocs()
		var claimTime time.Duration
		for i := 0; b.Loop(); i++ {
			t0 := time.Now()
			g, err := s.Claim(ctx, fmt.Sprintf("l%d", i), "h", time.Second)
			claimTime += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Revoke(ctx, g); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/claimTime.Seconds(), "claims/s")
	})
}

// BenchmarkExtend measures the latency of Extend of one live term (a
// keep-alive plus a read), with p50 and p99, beside a bare KeepAliveOnce.
func BenchmarkExtend(b *testing.B) {
	cli := etcdtest.Start(b).Client()
	s := newEtcdStore(b, cli, "/bench/extend/")
	ctx := context.Background()
	g, err := s.Claim(ctx, "singular", "h", 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}

	measure := func(b *testing.B, op func() error) {
		b.ReportAllocs()
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			t0 := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	id, err := cli.Get(ctx, s.Key("singular"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bare-keepalive", func(b *testing.B) {
		measure(b, func() error {
			_, err := cli.KeepAliveOnce(ctx, clientv3LeaseID(id.Kvs[0].Lease))
			return err
		})
	})
	b.Run("extend", func(b *testing.B) {
		measure(b, func() error {
			_, err := s.Extend(ctx, g, 10*time.Second)
			return err
		})
	})
}

func clientv3LeaseID(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }

// BenchmarkFencedPut measures what a fence adds to a write: a put in a
// transaction guarded by Store.Fence of a live term, beside the same put in
// a transaction with no compare, on the embedded single-member etcd.
func BenchmarkFencedPut(b *testing.B) {
	cli := etcdtest.Start(b).Client()
	s := newEtcdStore(b, cli, "/bench/fence/")
	ctx := context.Background()
	g, err := s.Claim(ctx, "singular", "h", 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	put := func(b *testing.B, txn func() clientv3.Txn) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := txn().Then(clientv3.OpPut("/bench/data", "v")).Commit()
			if err != nil || !resp.Succeeded {
				b.Fatal(err, resp.Succeeded)
			}
		}
	}
	b.Run("unfenced", func(b *testing.B) {
		put(b, func() clientv3.Txn { return cli.Txn(ctx) })
	})
	b.Run("fenced", func(b *testing.B) {
		put(b, func() clientv3.Txn { return cli.Txn(ctx).If(s.Fence("singular", g.Token)) })
	})
}

// BenchmarkSessionExtend measures a SessionStore's Extend of a term it
// granted — its hot path, answered from the session's promise without a
// call to etcd — with a logger set, beside the same Extend without the
// StoreReport counters (the atomic adds every call pays).
func BenchmarkSessionExtend(b *testing.B) {
	cli := etcdtest.Start(b).Client()
	s := newSessionStore(b, cli, "/bench/sessionextend/", time.Minute,
		etcdlease.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx := context.Background()
	g, err := s.Claim(ctx, "singular", "h", 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		extend func(context.Context, leasestore.Grant, time.Duration) (leasestore.Grant, error)
	}{
		{"uncounted", func(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
			return etcdlease.ExtendUncounted(s, ctx, g, d)
		}},
		{"counted", s.Extend},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.extend(ctx, g, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
