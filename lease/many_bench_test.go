package lease_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// manyTrackersEnv enables the 100,000-tracker runs of BenchmarkManyTrackers
// (about 0.9 GB resident and 2–10 s per sub-benchmark on a 2-core host).
const manyTrackersEnv = "COLDSTART_LEASE_100K"

// BenchmarkManyTrackers starts N trackers together, each on its own lease in
// one MemStore (Duration 30 s, wall clock), as a controller leading N
// applications would, and reports per lease what they cost once all are
// held: live heap (after a GC), goroutine stack, and goroutines; and the
// time from the first NewTracker to every tracker's first Held. ns/op is one
// whole round: start, all held, measure, Close all.
//
// store=memstore is MemStore as it is, a LossNotifier, so each tracker also
// holds a loss watch (a context, an expiry timer); store=plain hides the
// LossNotifier, leaving the tracker alone. N=100,000 runs only with
// COLDSTART_LEASE_100K=1. Use -benchtime=1x.
func BenchmarkManyTrackers(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, notify := range []bool{true, false} {
			name := fmt.Sprintf("n=%d/store=plain", n)
			if notify {
				name = fmt.Sprintf("n=%d/store=memstore", n)
			}
			b.Run(name, func(b *testing.B) {
				if n > 10_000 && os.Getenv(manyTrackersEnv) == "" {
					b.Skipf("set %s=1 to run %d trackers", manyTrackersEnv, n)
				}
				for range b.N {
					runManyTrackers(b, n, notify)
				}
			})
		}
	}
}

func runManyTrackers(b *testing.B, n int, notify bool) {
	var store leasestore.Store = leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clock.WallClock})
	if !notify {
		store = storeOnly{store}
	}
	before := measureLive()
	start := time.Now()
	trackers := make([]*lease.Tracker, n)
	for i := range trackers {
		tr, err := lease.NewTracker(lease.Config{
			Store: store, Name: fmt.Sprintf("app-%d", i), Holder: "controller-0", Duration: 30 * time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		trackers[i] = tr
	}
	ctx := context.Background()
	for _, tr := range trackers {
		if _, err := tr.Check(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
	allHeld := time.Since(start)
	b.StopTimer()
	after := measureLive()
	b.StartTimer()
	for _, tr := range trackers {
		if err := tr.Close(); err != nil {
			b.Fatal(err)
		}
	}
	per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / float64(n) }
	b.ReportMetric(per(before.heap, after.heap), "heap-B/lease")
	b.ReportMetric(per(before.stack, after.stack), "stack-B/lease")
	b.ReportMetric(per(before.goroutines, after.goroutines), "goroutines/lease")
	b.ReportMetric(float64(allHeld.Milliseconds()), "ms-to-all-held")
	runtime.KeepAlive(trackers)
}

type liveMem struct{ heap, stack, goroutines uint64 }

// measureLive collects garbage and reads the live heap, the goroutine
// stacks in use and the number of goroutines.
func measureLive() liveMem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return liveMem{heap: ms.HeapAlloc, stack: ms.StackInuse, goroutines: uint64(runtime.NumGoroutine())}
}
