package history_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// heldTracker returns a tracker holding its lease for an hour, so that
// every Check is answered from its cache: the call a fault run records
// most often.
func heldTracker(b *testing.B) *lease.Tracker {
	tr, err := lease.NewTracker(lease.Config{Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}),
		Name: "l", Holder: "a", Duration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tr.Close() })
	if _, err := tr.Check(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	return tr
}

// The baseline: a Check answered from cache, not recorded.
func BenchmarkCheck(b *testing.B) {
	tr := heldTracker(b)
	ctx := context.Background()
	for b.Loop() {
		_, _ = tr.Check(ctx, 0)
	}
}

// A Check timed before and after, as a recording needs, not recorded.
func BenchmarkCheckTimed(b *testing.B) {
	tr := heldTracker(b)
	ctx := context.Background()
	for b.Loop() {
		asked := time.Now()
		st, err := tr.Check(ctx, 0)
		_ = history.Answer{Node: "a", Status: st, Err: err, Asked: asked, Returned: time.Now()}
	}
}

// runLength is the size of the histories the Record benchmarks fill: a
// fault run's (4 nodes checking every 5ms for 30s are 24 000 answers),
// so that the heap they measure is one a run has, not b.N answers'.
const runLength = 100_000

// A Check as a fault run records it: timed before and after, recorded.
func BenchmarkCheckRecorded(b *testing.B) {
	tr := heldTracker(b)
	ctx := context.Background()
	rec := new(history.Recorder)
	n := 0
	for b.Loop() {
		if n++; n%runLength == 0 {
			rec = new(history.Recorder)
		}
		asked := time.Now()
		st, err := tr.Check(ctx, 0)
		rec.Record(history.Answer{Node: "a", Status: st, Err: err, Asked: asked, Returned: time.Now()})
	}
}

// Record alone, from one goroutine.
func BenchmarkRecord(b *testing.B) {
	rec := new(history.Recorder)
	a := held("a", 5, 0, 0, 2)
	n := 0
	for b.Loop() {
		if n++; n%runLength == 0 {
			rec = new(history.Recorder)
		}
		rec.Record(a)
	}
}

// Record from every P at once, as many trackers' goroutines do (into one
// history, however long the benchmark runs).
func BenchmarkRecordParallel(b *testing.B) {
	var rec history.Recorder
	a := held("a", 5, 0, 0, 2)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec.Record(a)
		}
	})
}

// Verify, per answer, of a fault run's history: three nodes checking in
// turn, a hand-over every 100 answers, and writes.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var rec history.Recorder
			for i := range n {
				term := i / 100
				s := float64(i) / 1000
				node := fmt.Sprint("node", term%3)
				rec.Record(held(node, uint64(term+1), s, s, float64(term+1)/10))
				if i%10 == 0 {
					rec.Record(write(node, uint64(term+1), s, s, true))
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if vs := rec.Verify(); len(vs) != 0 {
					b.Fatal(vs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/answer")
		})
	}
}
