package apiservertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/coldstart-go/coldstart/lease"
)

// The side-by-side hand-over benchmarks: coldstart's tracker on k8slease at
// the defaults, Duration 2 s (its Lease says leaseDurationSeconds 4) and 1 s
// (2: the Lease client-go writes), against client-go's leaderelection with
// ReleaseOnCancel, LeaseDuration 2 s, RenewDeadline 1.5 s, RetryPeriod
// 0.5 s, on the one API server. Each op of BenchmarkHandOver is one
// hand-over, each op of BenchmarkWaitingFollower one second of waiting: run
// them with -benchtime=20x (about 6 minutes in all).
const (
	cgLease = 2 * time.Second // client-go's LeaseDuration
	cgRenew = 1500 * time.Millisecond
	cgRetry = 500 * time.Millisecond
)

// requestCounter counts the requests a client sends; first is closed when
// the first has been answered.
type requestCounter struct {
	n         atomic.Int64
	answered  atomic.Bool
	first     chan struct{}
	transport http.RoundTripper
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	resp, err := c.transport.RoundTrip(r)
	if c.answered.CompareAndSwap(false, true) {
		close(c.first)
	}
	return resp, err
}

// countedClient is a client of the test server whose requests are counted.
func countedClient(b *testing.B) (kubernetes.Interface, *requestCounter) {
	c := &requestCounter{first: make(chan struct{})}
	cs := newClientWith(b, "", func(rt http.RoundTripper) http.RoundTripper {
		c.transport = rt
		return c
	})
	return cs, c
}

// reportGaps reports the p50 and max of gaps in milliseconds.
func reportGaps(b *testing.B, gaps []time.Duration) {
	slices.Sort(gaps)
	b.Logf("gaps: %v", gaps)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(gaps[len(gaps)/2]), "p50-ms")
	b.ReportMetric(ms(gaps[len(gaps)-1]), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// arbitraryMoment waits up to a second: a release comes at any point of a
// follower's wait, not just after its claim.
func arbitraryMoment() { <-time.After(rand.N(time.Second)) }

// BenchmarkHandOver measures the graceful gap (the leader starts its
// release: Close with ReleaseOnClose, or cancelling client-go's Run with
// ReleaseOnCancel → the waiting follower leads) and the crash gap (the
// leader stops without releasing → the follower leads), p50 and max over
// b.N hand-overs, for coldstart's tracker and client-go's elector alike.
// A fresh follower starts for each hand-over, and the leader stops at an
// arbitrary moment (up to a second) after the follower's first call.
func BenchmarkHandOver(b *testing.B) {
	for _, crash := range []bool{false, true} {
		kind := map[bool]string{false: "graceful", true: "crash"}[crash]
		for _, d := range []time.Duration{2 * time.Second, time.Second} {
			b.Run(fmt.Sprintf("%s/coldstart-Duration=%v", kind, d), func(b *testing.B) { benchHandOverColdstart(b, d, crash) })
		}
		b.Run(kind+"/client-go", func(b *testing.B) { benchHandOverClientGo(b, crash) })
	}
}

func benchHandOverColdstart(b *testing.B, d time.Duration, crash bool) {
	clients := []kubernetes.Interface{newClient(b, ""), newClient(b, "")}
	ns := newNamespace(b, clients[0])
	cfg := func(i int) lease.Config {
		return lease.Config{Store: newStore(b, clients[i%2], ns), Name: "h", Holder: fmt.Sprintf("n%d", i),
			Duration: d, ReleaseOnClose: !crash}
	}
	leader := benchTracker(b, cfg(0))
	awaitState(b, leader, lease.Held)
	var gaps []time.Duration
	for i := 1; b.Loop(); i++ {
		f := benchTracker(b, cfg(i))
		awaitState(b, f, lease.NotHeld)
		arbitraryMoment()
		start := time.Now()
		if err := leader.Close(); err != nil {
			b.Fatal(err)
		}
		awaitState(b, f, lease.Held)
		gaps = append(gaps, time.Since(start))
		leader = f
	}
	reportGaps(b, gaps)
}

func benchHandOverClientGo(b *testing.B, crash bool) {
	ns := newNamespace(b, newClient(b, ""))
	leader := startElector(b, ns, "n0", !crash)
	leader.awaitLeading(b)
	var gaps []time.Duration
	for i := 1; b.Loop(); i++ {
		f := startElector(b, ns, fmt.Sprintf("n%d", i), !crash)
		f.awaitFirstCall(b)
		arbitraryMoment()
		start := time.Now()
		leader.stop()
		f.awaitLeading(b)
		gaps = append(gaps, time.Since(start))
		<-leader.done
		leader = f
	}
	reportGaps(b, gaps)
}

// elector is one client-go leaderelection candidate, running until stop.
type elector struct {
	leading chan struct{} // closed when it starts leading
	calls   *requestCounter
	stop    context.CancelFunc
	done    chan struct{} // closed when Run has returned (after its release, if any)
}

// startElector starts a client-go candidate for the Lease "h" of ns, on a
// client of its own, stopped at cleanup.
func startElector(b *testing.B, ns, id string, release bool) *elector {
	cs, calls := countedClient(b)
	ctx, cancel := context.WithCancel(context.Background())
	e := &elector{leading: make(chan struct{}), calls: calls, stop: cancel, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "h", Namespace: ns},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   cgLease,
		RenewDeadline:   cgRenew,
		RetryPeriod:     cgRetry,
		ReleaseOnCancel: release,
		Name:            id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(e.leading) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	b.Cleanup(func() {
		cancel()
		<-e.done
	})
	return e
}

func (e *elector) awaitLeading(b *testing.B) {
	b.Helper()
	select {
	case <-e.leading:
	case <-time.After(20 * time.Second):
		b.Fatal("the client-go candidate did not lead within 20s")
	}
}

// awaitFirstCall waits until the candidate has read the Lease once: it
// knows the leader, and waits.
func (e *elector) awaitFirstCall(b *testing.B) {
	b.Helper()
	select {
	case <-e.calls.first:
	case <-time.After(20 * time.Second):
		b.Fatal("the client-go candidate made no call within 20s")
	}
}

// BenchmarkWaitingFollower measures the requests per second a follower
// sends to the API server while another party leads — every request its
// client sends: claims, reads, watches — for coldstart's tracker (which
// waits on a watch of the Lease, with a claim once a term) and client-go's
// candidate (a read every RetryPeriod or so). Each op is one second of
// waiting.
func BenchmarkWaitingFollower(b *testing.B) {
	b.Run("coldstart-Duration=2s", func(b *testing.B) {
		ns := newNamespace(b, newClient(b, ""))
		awaitState(b, benchTracker(b, lease.Config{Store: newStore(b, newClient(b, ""), ns), Name: "h", Holder: "a",
			Duration: 2 * time.Second}), lease.Held)
		cs, calls := countedClient(b)
		awaitState(b, benchTracker(b, lease.Config{Store: newStore(b, cs, ns), Name: "h", Holder: "b",
			Duration: 2 * time.Second}), lease.NotHeld)
		benchWaiting(b, calls)
	})
	b.Run("client-go", func(b *testing.B) {
		ns := newNamespace(b, newClient(b, ""))
		startElector(b, ns, "a", true).awaitLeading(b)
		f := startElector(b, ns, "b", true)
		f.awaitFirstCall(b)
		benchWaiting(b, f.calls)
	})
}

func benchWaiting(b *testing.B, calls *requestCounter) {
	before, start := calls.n.Load(), time.Now()
	for b.Loop() {
		<-time.After(time.Second)
	}
	b.ReportMetric(float64(calls.n.Load()-before)/time.Since(start).Seconds(), "calls/s")
	b.ReportMetric(0, "ns/op")
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
