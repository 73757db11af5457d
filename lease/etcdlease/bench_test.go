package etcdlease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkClaim measures claims per second against the embedded
// single-member etcd: each op claims a fresh lease name and revokes it (so
// etcd's lease count stays flat). The baseline beside it is a bare etcd Put
// on the same server, the cheapest write there is.
func BenchmarkClaim(b *testing.B) {
	_, cli := startSingle(b)
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
	_, cli := startSingle(b)
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
