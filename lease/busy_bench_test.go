package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// BenchmarkBusyLeader: does a leader whose process keeps every P busy keep
// leading on a healthy store? Trackers hold leases on a MemStore on the
// wall clock, each running a Lead function, while a goroutine spins on
// every P and as many more allocate garbage (a storm that keeps the GC
// running, its pauses and assists included). The store never fails, so
// every Unknown and every Lead function whose ctx ended is the tracker's
// doing. It reports, over 500 renewals or more (-benchtime=1x), the
// renewals, the Unknowns (each two transitions, Held → Unknown → Held),
// the Lead functions ended, the Unknowns a stopped clock caused (none
// should: every other one is a renewal later than the validity it had),
// the terms that lapsed in the store before the renewal reached it, and
// the late renewals by the cause the tracker gave (Report.LateRenewals and
// its Late* counts).
func BenchmarkBusyLeader(b *testing.B) {
	for _, s := range []struct {
		d        time.Duration
		trackers int
	}{
		{2 * time.Second, 100},       // the defaults: Margin 200 ms; ~50 renewals/s in all
		{200 * time.Millisecond, 10}, // Margin 20 ms; the same load
	} {
		b.Run(fmt.Sprintf("Duration=%v", s.d), func(b *testing.B) { busyLeaders(b, s.d, s.trackers) })
	}
}

// busyLeaders runs trackers of Duration d, each leading, on a busy process
// and reports what became of them.
func busyLeaders(b *testing.B, d time.Duration, trackers int) {
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	var ended atomic.Int64 // Lead functions whose ctx ended before the bench did
	var unknowns unknownCauses
	var leads sync.WaitGroup
	trs := make([]*lease.Tracker, 0, trackers)
	defer func() {
		cancel()
		leads.Wait()
		for _, tr := range trs {
			_ = tr.Close()
		}
	}()
	// Spread over one renewal interval, so that renewals come evenly.
	pace := time.NewTicker((2*d - d/10) / 2 / time.Duration(trackers))
	defer pace.Stop()
	for i := range trackers {
		<-pace.C
		tr, err := lease.NewTracker(lease.Config{
			Store: store, Name: fmt.Sprintf("l%d", i), Holder: "h", Duration: d, Logger: slog.New(&unknowns),
		})
		if err != nil {
			b.Fatal(err)
		}
		trs = append(trs, tr)
		if _, err := tr.Check(ctx, 0); err != nil {
			b.Fatal(err)
		}
		leads.Go(func() {
			_ = tr.Lead(ctx, func(lctx context.Context, _ lease.Status) error {
				<-lctx.Done()
				if ctx.Err() == nil {
					ended.Add(1)
				}
				return lctx.Err()
			})
		})
	}
	before := make([]lease.Report, len(trs))
	var renewed0 uint64
	for i, tr := range trs {
		before[i] = tr.Report()
		renewed0 += before[i].Calls.Extend.OK
	}
	stop := busyProcess()
	b.ResetTimer()
	want := uint64(max(b.N, 500))
	for {
		var renewed uint64
		for _, tr := range trs {
			renewed += tr.Report().Calls.Extend.OK
		}
		if renewed-renewed0 >= want {
			break
		}
		time.Sleep(50 * time.Millisecond) // polls a figure; no goroutine waits on it
	}
	b.StopTimer()
	stop()
	var sum lease.Report
	for i, tr := range trs {
		r := tr.Report()
		sum.Calls.Extend.OK += r.Calls.Extend.OK - before[i].Calls.Extend.OK
		sum.Transitions += r.Transitions - before[i].Transitions
		sum.Losses += r.Losses - before[i].Losses
		sum.LateRenewals += r.LateRenewals - before[i].LateRenewals
		sum.LateThrottled += r.LateThrottled - before[i].LateThrottled
		sum.LateGCPause += r.LateGCPause - before[i].LateGCPause
		sum.LateScheduler += r.LateScheduler - before[i].LateScheduler
		sum.LateSuspend += r.LateSuspend - before[i].LateSuspend
		sum.LateClockStep += r.LateClockStep - before[i].LateClockStep
	}
	b.ReportMetric(float64(sum.Calls.Extend.OK), "renewals")
	b.ReportMetric(float64(sum.Transitions)/2, "unknowns")
	b.ReportMetric(float64(ended.Load()), "leads-ended")
	b.ReportMetric(float64(unknowns.stopped.Load()), "unknowns-stopped-clock")
	b.ReportMetric(float64(sum.Losses), "terms-lapsed") // the store said the term was over
	b.ReportMetric(float64(sum.LateRenewals), "late")
	for name, n := range map[string]uint64{
		"late-throttled": sum.LateThrottled, "late-gc": sum.LateGCPause, "late-sched": sum.LateScheduler,
		"late-suspend": sum.LateSuspend, "late-clock-step": sum.LateClockStep,
	} {
		b.ReportMetric(float64(n), name)
	}
	other := sum.LateThrottled + sum.LateGCPause + sum.LateScheduler + sum.LateSuspend + sum.LateClockStep
	b.ReportMetric(float64(sum.LateRenewals-other), "late-unexplained")
}

// busyProcess keeps every P busy, half of the goroutines spinning and half
// making garbage, until the function it returns is called.
func busyProcess() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			n := 0
			for !done.Load() {
				n++
			}
			_ = n
		})
		wg.Go(func() {
			var live [64][]byte // a live heap the GC must mark
			for i := 0; !done.Load(); i++ {
				live[i%len(live)] = make([]byte, 32<<10)
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// unknownCauses is a slog.Handler that counts the records of a change to
// Unknown whose cause is a stopped clock (the rest ran out: a renewal
// later than the validity it had).
type unknownCauses struct{ stopped atomic.Int64 }

func (u *unknownCauses) Enabled(context.Context, slog.Level) bool { return true }
func (u *unknownCauses) WithAttrs([]slog.Attr) slog.Handler       { return u }
func (u *unknownCauses) WithGroup(string) slog.Handler            { return u }

func (u *unknownCauses) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "lease state unknown" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" && lease.StoppedClockForTest(err) {
			u.stopped.Add(1)
		}
		return true
	})
	return nil
}
