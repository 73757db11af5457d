package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/gate"
)

// closedChan is the baseline: the cheapest possible open gate.
type closedChan chan struct{}

func (c closedChan) Unlocked() <-chan struct{} { return c }
func (c closedChan) IsUnlocked() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func openChan() closedChan {
	c := make(closedChan)
	close(c)
	return c
}

func openLock() *gate.Lock {
	l := gate.New("open")
	l.Unlock()
	return l
}

var sink bool

func BenchmarkIsUnlocked(b *testing.B) {
	b.Run("bare-chan", func(b *testing.B) {
		var w gate.Waiter = openChan()
		b.ReportAllocs()
		for b.Loop() {
			sink = w.IsUnlocked()
		}
	})
	b.Run("lock", func(b *testing.B) {
		var w gate.Waiter = openLock()
		b.ReportAllocs()
		for b.Loop() {
			sink = w.IsUnlocked()
		}
	})
}

func BenchmarkWaitOpen(b *testing.B) {
	ctx := context.Background()
	b.Run("bare-chan", func(b *testing.B) {
		c := openChan()
		b.ReportAllocs()
		for b.Loop() {
			select {
			case <-c:
			case <-ctx.Done():
			}
		}
	})
	b.Run("lock", func(b *testing.B) {
		l := openLock()
		b.ReportAllocs()
		for b.Loop() {
			if err := gate.Wait(ctx, l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// park starts 10,000 goroutines blocked in wait and returns once all of
// them have started; done.Wait returns once all of them have returned.
func park(wait func()) (done *sync.WaitGroup) {
	const n = 10000
	var started sync.WaitGroup
	done = new(sync.WaitGroup)
	started.Add(n)
	done.Add(n)
	for range n {
		go func() { started.Done(); wait(); done.Done() }()
	}
	started.Wait()
	return done
}

// wake10k parks 10,000 goroutines on wait, then times open() until the
// last of them has returned.
func wake10k(wait func(), open func()) time.Duration {
	done := park(wait)
	t := time.Now()
	open()
	done.Wait()
	return time.Since(t)
}

// herds are the ways 10,000 waiters can be released: a bare channel and a
// Lock, each waited on with a ctx that cannot end (context.Background) and
// with one that can (a bare select on the channel and ctx.Done()).
var herds = []struct {
	name  string
	block func(ctx context.Context) (wait, open func())
}{
	{"bare-chan", func(context.Context) (func(), func()) {
		c := make(chan struct{})
		return func() { <-c }, func() { close(c) }
	}},
	{"lock", func(ctx context.Context) (func(), func()) {
		l := gate.New("herd")
		return func() { _ = gate.Wait(ctx, l) }, l.Unlock
	}},
}

// BenchmarkWake10k measures one Unlock releasing 10,000 blocked waiters:
// the time from Unlock to the last waiter returning.
func BenchmarkWake10k(b *testing.B) {
	for _, h := range herds {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				wait, open := h.block(context.Background())
				done := park(wait)
				b.StartTimer()
				open()
				done.Wait()
			}
		})
	}
}

// BenchmarkWake10kPaired releases a bare-channel herd and a Lock herd on
// every iteration, taking turns at going first, so that both see the same
// load on a shared machine, and reports the median of the per-iteration
// ratios: the figure DESIGN bounds at 1.2. The cancellable-ctx variant has
// every waiter also select on a ctx that can end, the bare channel's too.
func BenchmarkWake10kPaired(b *testing.B) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ctx := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"cancellable-ctx", cancellable}} {
		b.Run(ctx.name, func(b *testing.B) {
			var bare, lock time.Duration
			var ratios []float64
			for b.Loop() {
				c := make(chan struct{})
				bareWait := func() { <-c }
				if ctx.ctx.Done() != nil {
					bareWait = func() {
						select {
						case <-c:
						case <-ctx.ctx.Done():
						}
					}
				}
				wait, open := herds[1].block(ctx.ctx)
				var tb, tl time.Duration
				if len(ratios)%2 == 0 {
					tb = wake10k(bareWait, func() { close(c) })
					tl = wake10k(wait, open)
				} else {
					tl = wake10k(wait, open)
					tb = wake10k(bareWait, func() { close(c) })
				}
				bare, lock = bare+tb, lock+tl
				ratios = append(ratios, float64(tl)/float64(tb))
			}
			slices.Sort(ratios)
			b.ReportMetric(float64(bare.Microseconds())/1000/float64(b.N), "bare-ms/wake")
			b.ReportMetric(float64(lock.Microseconds())/1000/float64(b.N), "lock-ms/wake")
			b.ReportMetric(ratios[len(ratios)/2], "lock/bare-median")
		})
	}
}

// board20 is a 20-gate board a controller might have mid-startup: 14 open,
// 5 still locked, 1 failed.
func board20() *gate.Board {
	b := gate.NewBoard(gate.BoardConfig{})
	for i := range 20 {
		l := add(b, fmt.Sprintf("gate-%02d", i))
		switch {
		case i < 14:
			l.Unlock()
		case i == 19:
			l.Fail(errors.New("no quorum"))
		}
	}
	return b
}

// BenchmarkReport is the cost of one Report of a 20-gate board, and of
// one whose entries follow components, half of them still locked: every
// Report first looks at their channels.
func BenchmarkReport(b *testing.B) {
	mid := board20()
	b.Run("report", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = mid.Report()
		}
	})
	followed := gate.NewBoard(gate.BoardConfig{})
	defer followed.Close() // ends the Follow goroutines
	never := make(chan struct{})
	opened := make(chan struct{})
	close(opened)
	for i := range 20 {
		if i%2 == 0 {
			followed.Follow(fmt.Sprintf("gate-%02d", i), gate.Channels(opened, nil))
		} else {
			followed.Follow(fmt.Sprintf("gate-%02d", i), gate.Channels(never, nil))
		}
	}
	b.Run("report-watched", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = followed.Report()
		}
	})
}

// boardGates returns a locked and an open gate on a board with logger
// (nil: none), for the hot paths with and without logs.
func boardGates(logger *slog.Logger) (locked, open *gate.Lock) {
	b := gate.NewBoard(gate.BoardConfig{Logger: logger})
	locked, open = add(b, "locked"), add(b, "open")
	open.Unlock()
	return locked, open
}

// BenchmarkBoardGateLogger is IsUnlocked and Wait on a board's gates with
// and without a logger: the logger must cost the hot paths nothing. The
// machines are shared and noisy, so each iteration times a batch of calls
// on both gates back to back (alternating which goes first) and the
// benchmark reports the median of the logger/no-logger ratios, beside the
// time of one call with the logger.
func BenchmarkBoardGateLogger(b *testing.B) {
	ctx := context.Background()
	plainLocked, plainOpen := boardGates(nil)
	loggedLocked, loggedOpen := boardGates(slog.New(slog.NewTextHandler(io.Discard, nil)))
	isUnlocked := func(l *gate.Lock) func(int) {
		return func(n int) {
			for range n {
				sink = l.IsUnlocked()
			}
		}
	}
	wait := func(l *gate.Lock) func(int) {
		return func(n int) {
			for range n {
				if err := gate.Wait(ctx, l); err != nil {
					panic(err)
				}
			}
		}
	}
	for _, tc := range []struct {
		name          string
		plain, logged func(n int)
	}{
		{"IsUnlocked-open", isUnlocked(plainOpen), isUnlocked(loggedOpen)},
		{"IsUnlocked-locked", isUnlocked(plainLocked), isUnlocked(loggedLocked)},
		{"Wait-open", wait(plainOpen), wait(loggedOpen)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const batch = 100_000
			var (
				ratios []float64
				logged time.Duration
				calls  int
			)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var tp, tl time.Duration
				if i%2 == 0 {
					tp, tl = timed(tc.plain, batch), timed(tc.logged, batch)
				} else {
					tl, tp = timed(tc.logged, batch), timed(tc.plain, batch)
				}
				ratios = append(ratios, float64(tl)/float64(tp))
				logged += tl
				calls += batch
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "logger/no-logger-median")
			b.ReportMetric(float64(logged.Nanoseconds())/float64(calls), "logger-ns/call")
		})
	}
}

func timed(f func(int), n int) time.Duration {
	start := time.Now()
	f(n)
	return time.Since(start)
}

// timelineBoard20 is a 20-gate board mid-startup with composites and
// declared inputs, so its chains are several links long: 16 leaves, 14 of
// them open, one failed; two AllOf; two gates after them.
func timelineBoard20() *gate.Board {
	b := gate.NewBoard(gate.BoardConfig{})
	leaves := make([]*gate.Lock, 16)
	for i := range leaves {
		leaves[i] = add(b, fmt.Sprintf("gate-%02d", i))
	}
	first := gate.AllOf("first-half", gate.Waiter(leaves[0]), leaves[1], leaves[2], leaves[3], leaves[4], leaves[5], leaves[6], leaves[7])
	put(b, first)
	stable := gate.AllOf("stable", gate.Waiter(first), leaves[8], leaves[9], leaves[10], leaves[11], leaves[12], leaves[13])
	put(b, stable)
	api := add(b, "api-port").After(stable)
	add(b, "workers").After(api)
	for i, l := range leaves {
		switch {
		case i < 14:
			l.Unlock()
		case i == 15:
			l.Fail(errors.New("no quorum"))
		}
	}
	api.Unlock()
	return b
}

// BenchmarkTimeline is the cost of a timeline of a 20-gate board and its
// critical chain (package boardview measures its answers).
func BenchmarkTimeline(b *testing.B) {
	board := timelineBoard20()
	b.Run("Timeline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = board.Timeline().CriticalChain("")
		}
	})
}

// BenchmarkUnlockOnBoard is a gate made, put on a board, and opened: the
// board's hook records the opening (no logger).
func BenchmarkUnlockOnBoard(b *testing.B) {
	board := gate.NewBoard(gate.BoardConfig{})
	b.ReportAllocs()
	for b.Loop() {
		l := gate.New("g")
		board.Add("g", l)
		l.Unlock()
	}
}
