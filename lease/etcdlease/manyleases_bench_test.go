package etcdlease_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// BenchmarkManyLeases is a controller's start and steady state: N trackers
// in one process, started together at default settings (Duration 10 s),
// on an embedded single-member etcd, with NewStore and NewSessionStore side
// by side (and the tracker alone on a MemStore, for its own cost). One op
// is one whole run. It reports:
//
//   - claim-all-s: seconds until every tracker has been Held;
//   - unheld: trackers never Held within claimAllWithin;
//   - rpc/s: etcd calls per second in the steady state, counted by client
//     interceptors: every unary call, stream opened and stream message sent;
//   - cpu-µs/lease-s: process CPU (client and the in-process etcd server
//     together, getrusage) per lease per second of steady state;
//   - heap-B/lease, goroutines/lease: after the claims, less before;
//   - check-p99-µs: Check(ctx, Duration) latency, one every millisecond
//     over the trackers in turn, during the steady state.
//
// COLDSTART_LEASES sets the Ns (comma-separated; default 1000,10000),
// COLDSTART_STEADY the steady-state window (default 10s: one renewal round
// of NewStore's trackers), COLDSTART_DURATION the trackers' Duration
// (default 10s; the claim storm of the lease-timeout incident is 2s, whose
// default call timeout, Duration/4, is 500ms), COLDSTART_INFLIGHT the stores'
// WithMaxInFlight.
func BenchmarkManyLeases(b *testing.B) {
	ns := envInts(b, "COLDSTART_LEASES", []int{1000, 10000})
	steady := envDuration(b, "COLDSTART_STEADY", 10*time.Second)
	d := envDuration(b, "COLDSTART_DURATION", 10*time.Second)
	for _, n := range ns {
		for _, kind := range manyLeaseKinds {
			b.Run(fmt.Sprintf("%s/n=%d", kind.name, n), func(b *testing.B) {
				for b.Loop() {
					runManyLeases(b, kind, n, d, steady)
				}
			})
		}
	}
}

// claimAllWithin bounds the wait for every tracker to hold.
const claimAllWithin = 60 * time.Second

// manyLeaseKind makes the store of one side of the benchmark, for trackers
// of Duration d; cli is nil for a store that needs no etcd.
type manyLeaseKind struct {
	name string
	etcd bool
	make func(b *testing.B, cli *clientv3.Client, d time.Duration) leasestore.Store
}

var manyLeaseKinds = []manyLeaseKind{
	{"Store", true, func(b *testing.B, cli *clientv3.Client, _ time.Duration) leasestore.Store {
		return newEtcdStore(b, cli, "/many/", inFlight(b))
	}},
	{"SessionStore", true, func(b *testing.B, cli *clientv3.Client, d time.Duration) leasestore.Store {
		// The TTL the SessionStore's doc asks for: three times the term
		// the trackers claim (2 × Duration).
		return newSessionStore(b, cli, "/many/", 3*2*d, inFlight(b))
	}},
	{"MemStore", false, func(*testing.B, *clientv3.Client, time.Duration) leasestore.Store {
		return leasestore.NewMemStore(leasestore.MemStoreConfig{})
	}},
}

func runManyLeases(b *testing.B, kind manyLeaseKind, n int, d, steady time.Duration) {
	var rpcs rpcCounter
	var store leasestore.Store
	if kind.etcd {
		store = kind.make(b, countingClient(b, etcdtest.Start(b).Endpoints()[0], &rpcs), d)
	} else {
		store = kind.make(b, nil, d)
	}
	heap0, g0 := heapInUse(), runtime.NumGoroutine()
	trackers, claimAll, unheld := startTrackers(b, store, n, d)
	heap1, g1 := heapInUse(), runtime.NumGoroutine()

	rpcs.reset()
	cpu0 := cpuTime(b)
	p99 := checkP99(trackers, d, steady)
	cpu := cpuTime(b) - cpu0
	calls := rpcs.total()

	b.ReportMetric(claimAll.Seconds(), "claim-all-s")
	b.ReportMetric(float64(unheld), "unheld")
	b.ReportMetric(float64(calls)/steady.Seconds(), "rpc/s")
	b.ReportMetric(float64(cpu.Microseconds())/(float64(n)*steady.Seconds()), "cpu-µs/lease-s")
	b.ReportMetric(float64(heap1-heap0)/float64(n), "heap-B/lease")
	b.ReportMetric(float64(g1-g0)/float64(n), "goroutines/lease")
	b.ReportMetric(float64(p99.Microseconds()), "check-p99-µs")
	b.Logf("%s n=%d: all held after %v (%d never), steady %d etcd calls in %v (%d unary, %d streams, %d stream messages)",
		kind.name, n, claimAll.Round(time.Millisecond), unheld, calls, steady,
		rpcs.unary.Load(), rpcs.streams.Load(), rpcs.messages.Load())
}

// startTrackers starts n trackers of Duration d on store together, closed
// at cleanup, and returns them once each has been Held (or claimAllWithin
// has passed): the time that took, and how many were never Held.
func startTrackers(b *testing.B, store leasestore.Store, n int, d time.Duration) ([]*lease.Tracker, time.Duration, int64) {
	start := time.Now()
	trackers := make([]*lease.Tracker, n)
	var held sync.WaitGroup
	var unheld atomic.Int64
	for i := range trackers {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: fmt.Sprintf("app-%d", i), Holder: "controller-0", Duration: d})
		if err != nil {
			b.Fatal(err)
		}
		trackers[i] = tr
		held.Add(1)
		go func() {
			defer held.Done()
			deadline := time.After(claimAllWithin)
			for {
				st, changed := tr.Current()
				if st.State == lease.Held {
					return
				}
				select {
				case <-changed:
				case <-deadline:
					unheld.Add(1)
					return
				}
			}
		}()
	}
	b.Cleanup(func() {
		for _, tr := range trackers {
			tr.Close()
		}
	})
	held.Wait()
	return trackers, time.Since(start), unheld.Load()
}

// checkP99 checks the trackers in turn for atLeast, one every millisecond,
// for window, and returns the 99th percentile latency.
func checkP99(trackers []*lease.Tracker, atLeast, window time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var lat []time.Duration
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			slices.Sort(lat)
			if len(lat) == 0 {
				return 0
			}
			return lat[len(lat)*99/100]
		case <-tick.C:
		}
		t0 := time.Now()
		_, _ = trackers[i%len(trackers)].Check(ctx, atLeast)
		lat = append(lat, time.Since(t0))
	}
}

// rpcCounter counts what a client sends to etcd.
type rpcCounter struct {
	unary, streams, messages atomic.Int64
}

func (c *rpcCounter) reset() {
	c.unary.Store(0)
	c.streams.Store(0)
	c.messages.Store(0)
}

func (c *rpcCounter) total() int64 {
	return c.unary.Load() + c.streams.Load() + c.messages.Load()
}

// countingStream counts the messages sent on a client stream.
type countingStream struct {
	grpc.ClientStream
	sent *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.sent.Add(1)
	return s.ClientStream.SendMsg(m)
}

// countingClient is a client of endpoint whose calls c counts, closed at
// cleanup.
func countingClient(b *testing.B, endpoint string, c *rpcCounter) *clientv3.Client {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.unary.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		c.streams.Add(1)
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return countingStream{ClientStream: s, sent: &c.messages}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// inFlight is the stores' WithMaxInFlight: COLDSTART_INFLIGHT, or the
// default.
func inFlight(b *testing.B) etcdlease.Option {
	return etcdlease.WithMaxInFlight(envInts(b, "COLDSTART_INFLIGHT", []int{etcdlease.DefaultMaxInFlight})[0])
}

func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var ns []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		ns = append(ns, n)
	}
	return ns
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
