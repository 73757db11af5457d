package lease_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// checker is what the fast-path benchmark measures: the tracker, and a
// mutex-guarded cache as the baseline it must beat.
type checker interface {
	Check(ctx context.Context, atLeast time.Duration) (lease.Status, error)
}

// mutexCache is the obvious alternative to an atomic snapshot: a status
// behind a RWMutex, rewritten by a renewer.
type mutexCache struct {
	mu sync.RWMutex
	st lease.Status
}

func (c *mutexCache) Check(_ context.Context, atLeast time.Duration) (lease.Status, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.st.State == lease.Held && time.Until(c.st.Until) >= atLeast {
		return c.st, nil
	}
	return c.st, errors.New("short")
}

// BenchmarkCheckFastPath measures Check answered from cache under
// b.RunParallel while a renewer publishes new snapshots, beside a
// RWMutex-guarded cache rewritten the same way. renewer=1ms asks for a
// renewal every millisecond (on 2 saturated cores the ticker goroutine gets
// far fewer; renewals/s says how many happened; production renews every few
// seconds); renewer=busy renews back to back, so the renewer also competes
// for the CPU. impl=tracker-20-followers adds 20 goroutines that follow
// every change through Current. Goal: ≤ 50 ns/op and 0 allocs/op, with or
// without followers. (With renewer=busy, B/op
// shows the renewer's snapshots amortised over the checks;
// TestCheckFastPathDoesNotAllocate shows Check itself allocates nothing.)
func BenchmarkCheckFastPath(b *testing.B) {
	const d = time.Minute
	for _, every := range []time.Duration{time.Millisecond, 0} {
		name := "renewer=busy"
		if every > 0 {
			name = "renewer=" + every.String()
		}
		for _, followers := range []int{0, 20} {
			impl := "/impl=tracker"
			if followers > 0 {
				impl = fmt.Sprintf("/impl=tracker-%d-followers", followers)
			}
			b.Run(name+impl, func(b *testing.B) { benchTracker(b, d, every, followers, nil) })
		}
		b.Run(name+"/impl=tracker-logger", func(b *testing.B) {
			benchTracker(b, d, every, 0, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))
		})
		b.Run(name+"/impl=rwmutex-baseline", func(b *testing.B) {
			c := &mutexCache{st: lease.Status{State: lease.Held, Holder: "h", Until: time.Now().Add(2 * d), Token: 1}}
			stop := renewEvery(every, func() bool {
				c.mu.Lock()
				c.st.Until = time.Now().Add(2 * d)
				c.mu.Unlock()
				return true
			})
			runParallelChecks(b, c)
			b.ReportMetric(float64(stop())/b.Elapsed().Seconds(), "renewals/s")
		})
	}
}

// benchTracker is BenchmarkCheckFastPath's tracker: checks in parallel
// while the renewer renews every `every`, `followers` goroutines follow
// every change through Current, and the tracker logs to log (nil: none).
func benchTracker(b *testing.B, d, every time.Duration, followers int, log *slog.Logger) {
	tr, err := lease.NewTracker(lease.Config{
		Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}), Name: "bench", Holder: "h", Duration: d, Clock: clock.WallClock,
		Logger: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Check(ctx, d); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var seen atomic.Int64
	for range followers {
		wg.Go(func() {
			for {
				_, changed := tr.Current()
				select {
				case <-changed:
					seen.Add(1)
				case <-done:
					return
				}
			}
		})
	}
	stop := renewEvery(every, func() bool {
		// The longest promise is never cached: each call renews.
		_, err := tr.Check(ctx, 2*d-d/10)
		return err == nil || errors.Is(err, lease.ErrRenewalFailed)
	})
	runParallelChecks(b, tr)
	b.ReportMetric(float64(stop())/b.Elapsed().Seconds(), "renewals/s")
	close(done)
	wg.Wait()
	if followers > 0 {
		b.ReportMetric(float64(seen.Load())/float64(followers)/b.Elapsed().Seconds(), "wakes/s/follower")
	}
}

func runParallelChecks(b *testing.B, c checker) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Check(ctx, 30*time.Second); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
}

// renewEvery calls renew every interval (0: back to back) until stop is
// called, which returns how many calls reported success.
func renewEvery(interval time.Duration, renew func() bool) (stop func() int64) {
	var n atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var tick <-chan time.Time
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			if tick != nil {
				select {
				case <-done:
					return
				case <-tick:
				}
			} else {
				select {
				case <-done:
					return
				default:
				}
			}
			if renew() {
				n.Add(1)
			}
		}
	})
	return func() int64 { close(done); wg.Wait(); return n.Load() }
}

// BenchmarkMemStore measures claims+extends per second in one MemStore
// with N lease names and M contenders: each contender extends the leases it
// holds, claims the others (mostly denied while held), and revokes one of
// its leases every 16th operation so that leases change hands.
func BenchmarkMemStore(b *testing.B) {
	for _, c := range []struct{ keys, contenders int }{{1, 1}, {1, 8}, {16, 8}, {256, 64}} {
		b.Run(fmt.Sprintf("keys=%d/contenders=%d", c.keys, c.contenders), func(b *testing.B) {
			benchMemStore(b, c.keys, c.contenders)
		})
	}
}

func benchMemStore(b *testing.B, keys, contenders int) {
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("lease-%d", i)
	}
	var claims, extends, denied atomic.Int64
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range contenders {
		wg.Go(func() {
			holder := fmt.Sprintf("c%d", c)
			held := make(map[string]leasestore.Grant)
			for i := c; next.Add(1) <= int64(b.N); i++ {
				name := names[i%keys]
				if g, ok := held[name]; ok {
					if i%16 == 0 {
						_ = store.Revoke(ctx, g)
						delete(held, name)
						continue
					}
					if g2, err := store.Extend(ctx, g, time.Minute); err == nil {
						held[name] = g2
						extends.Add(1)
					} else {
						delete(held, name)
					}
					continue
				}
				if g, err := store.Claim(ctx, name, holder, time.Minute); err == nil {
					held[name] = g
					claims.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(claims.Load()+extends.Load())/s, "claims+extends/s")
	b.ReportMetric(float64(b.N)/s, "calls/s")
	b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
}

// BenchmarkStoreCounters measures what StoreCounters adds to a store call:
// op=count is one Begin(OpExtend) and its done alone, op=memstore-extend a
// whole MemStore Extend (which counts too), serially and with every
// goroutine sharing one set of counters (and, for MemStore, one store, each
// goroutine on its own lease). The counting's share of a call is
// count/memstore-extend in the same run.
func BenchmarkStoreCounters(b *testing.B) {
	ctx := context.Background()
	for _, parallel := range []bool{false, true} {
		mode := "serial"
		if parallel {
			mode = "parallel"
		}
		run := func(b *testing.B, body func() func()) {
			b.ReportAllocs()
			if !parallel {
				op := body()
				b.ResetTimer()
				for b.Loop() {
					op()
				}
				return
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				op := body()
				for pb.Next() {
					op()
				}
			})
		}
		b.Run(mode+"/op=count", func(b *testing.B) {
			var c leasestore.Counters
			run(b, func() func() { return func() { c.Begin(leasestore.OpExtend)(nil) } })
		})
		b.Run(mode+"/op=memstore-extend", func(b *testing.B) {
			store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
			var n atomic.Int64
			run(b, func() func() {
				g, err := store.Claim(ctx, fmt.Sprintf("lease-%d", n.Add(1)), "h", time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				return func() {
					if _, err := store.Extend(ctx, g, time.Hour); err != nil {
						b.Error(err)
					}
				}
			})
		})
	}
}

// BenchmarkCheckWithLogger measures Check's fast path (answered from cache,
// one goroutine, no renewal due) with no logger and with a logger that
// formats every record it gets, Debug included: Check never touches it, so
// the two should match, with 0 allocs/op.
func BenchmarkCheckWithLogger(b *testing.B) {
	loggers := []struct {
		name string
		log  *slog.Logger
	}{
		{"none", nil},
		{"text", slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))},
	}
	for _, l := range loggers {
		b.Run("logger="+l.name, func(b *testing.B) {
			tr, err := lease.NewTracker(lease.Config{
				Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}), Name: "bench", Holder: "h",
				Duration: time.Hour, Clock: clock.WallClock, Logger: l.log,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			ctx := context.Background()
			if _, err := tr.Check(ctx, time.Minute); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Check(ctx, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGracefulHandOver measures, in real time on MemStore at the
// defaults (Duration 2s), the gap from a leader's release (Close with
// ReleaseOnClose) to its follower leading, over 50 hand-overs: a follower
// that polls every ClaimInterval (the store's watch hidden) against one
// woken by MemStore's ReleaseWatcher. Each release comes at a random
// moment of the poll's interval. Run with -benchtime=1x.
func BenchmarkGracefulHandOver(b *testing.B) {
	const handovers = 50
	const duration = 2 * time.Second
	for _, watch := range []bool{false, true} {
		name := "polls"
		if watch {
			name = "watches"
		}
		b.Run(name, func(b *testing.B) {
			var gaps []time.Duration
			for range b.N {
				for i := range handovers {
					gaps = append(gaps, handOver(b, watch, fmt.Sprintf("l%d", i), duration))
				}
			}
			slices.Sort(gaps)
			b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// handOver runs one graceful hand-over of lease name and returns its gap.
func handOver(b *testing.B, watch bool, name string, duration time.Duration) time.Duration {
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	var follower leasestore.Store = mem
	if !watch {
		follower = storeOnly{mem}
	}
	start := func(store leasestore.Store, holder string, release bool) *lease.Tracker {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: name, Holder: holder,
			Duration: duration, ReleaseOnClose: release})
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	await := func(tr *lease.Tracker, s lease.State) {
		for {
			st, changed := tr.Current()
			if st.State == s {
				return
			}
			<-changed
		}
	}
	a := start(mem, "a", true)
	await(a, lease.Held)
	f := start(follower, "f", false)
	defer f.Close()
	await(f, lease.NotHeld)
	// A random moment of the follower's poll interval (Duration/10).
	time.Sleep(time.Duration(rand.Int64N(int64(duration / 10))))
	released := time.Now()
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
	await(f, lease.Held)
	return time.Since(released)
}
