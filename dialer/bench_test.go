package dialer_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/dialer"
)

// armedClock is the wall clock, announcing every timer it arms so that a
// benchmark knows when a Dial has parked.
type armedClock struct {
	clock.Clock
	armed chan time.Duration
}

func (c armedClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Clock.NewTimer(d)
	select {
	case c.armed <- d:
	default:
	}
	return t
}

// BenchmarkLocalReady measures the time from LocalReady closing to a
// successful local dial, on loopback, against a baseline that polls the
// readiness every 100 ms, in the same run. Half the dialer trials close
// LocalReady while Dial waits out its grace period, half while it sits in
// backoff after a failed fallback round to a (down) peer. Each op is one
// dialer trial; the metrics also give peer dials made after ready (must be 0).
func BenchmarkLocalReady(b *testing.B) {
	const minTrials = 200
	peer, err := net.Listen("tcp", "127.0.0.1:0") // reserve, then free: a peer that is down
	if err != nil {
		b.Fatal(err)
	}
	peer.Close()
	lr := &localReadyTrials{port: acceptAndClose(b), peerAddr: peer.Addr().String()}

	lats := make([]time.Duration, 0, max(b.N, minTrials))
	b.ResetTimer()
	for i := range b.N {
		lats = append(lats, lr.run(b, i%2 == 1))
	}
	b.StopTimer()
	for len(lats) < minTrials {
		lats = append(lats, lr.run(b, len(lats)%2 == 1))
	}
	polled := pollTrials(b, net.JoinHostPort("127.0.0.1", strconv.Itoa(lr.port)), minTrials)

	dp50, dp99 := percentile(lats, 0.50), percentile(lats, 0.99)
	pp50, pp99 := percentile(polled, 0.50), percentile(polled, 0.99)
	b.ReportMetric(ms(dp50), "dialer-p50-ms")
	b.ReportMetric(ms(dp99), "dialer-p99-ms")
	b.ReportMetric(ms(pp50), "poll100ms-p50-ms")
	b.ReportMetric(ms(pp99), "poll100ms-p99-ms")
	b.ReportMetric(float64(pp99)/float64(dp99), "p99-speedup-x")
	b.ReportMetric(float64(lr.peerDialsAfterReady.Load()), "peer-dials-after-ready")
}

// localReadyTrials are BenchmarkLocalReady's dialer trials: a local
// controller on port, and a peer at peerAddr that is down.
type localReadyTrials struct {
	port                int
	peerAddr            string
	peerDialsAfterReady atomic.Int64
	nd                  net.Dialer
}

// run is one trial: a Dial parks (in the grace wait, or in backoff after
// falling back to the peer), then LocalReady closes; it returns the time
// from the close to the local connection.
func (lr *localReadyTrials) run(b *testing.B, fallingBack bool) time.Duration {
	ready := make(chan struct{})
	var closed atomic.Bool
	clk := armedClock{clock.WallClock, make(chan time.Duration, 16)}
	cfg := dialer.Config{
		LocalPort:       lr.port,
		Remote:          func() []string { return []string{lr.peerAddr} },
		LocalReady:      ready,
		LocalReadyGrace: time.Hour,
		Clock:           clk,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == lr.peerAddr && closed.Load() {
				lr.peerDialsAfterReady.Add(1)
			}
			return lr.nd.DialContext(ctx, network, addr)
		},
	}
	park := time.Hour // the grace timer
	if fallingBack {
		cfg.LocalReadyGrace = time.Nanosecond
		cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
		park = time.Hour / 2 // a backoff pause, drawn from [30m, 1h]
	}
	d, err := dialer.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	done := goDial(context.Background(), d)
	for armed := range clk.armed {
		if armed >= park {
			break
		}
	}
	closed.Store(true)
	start := time.Now()
	close(ready)
	r := <-done
	lat := time.Since(start)
	if r.err != nil || !r.route.Local {
		b.Fatalf("dial after ready: %+v", r)
	}
	r.conn.Close()
	return lat
}

// pollTrials runs n trials of the baseline concurrently: a caller checking
// readiness every 100 ms, then dialling addr. Readiness arrives at a random
// moment of its polling period.
func pollTrials(b *testing.B, addr string, n int) []time.Duration {
	lats := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ready := make(chan struct{})
			var readyAt time.Time
			closer := time.AfterFunc(rand.N(100*time.Millisecond), func() {
				readyAt = time.Now()
				close(ready)
			})
			defer closer.Stop()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ready: // the poller checks the flag without blocking
				default:
					<-tick.C
					continue
				}
				var nd net.Dialer
				conn, err := nd.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				lats[i] = time.Since(readyAt) // readyAt happens-before close(ready)
				conn.Close()
				return
			}
		})
	}
	wg.Wait()
	return lats
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkDialReady is the steady state of a ready controller: Dial on
// loopback beside a bare net.Dialer to the same listener, showing the
// dialer's own overhead, and with a Logger (a call counts with an atomic
// add either way; with a Logger it also loads two atomics; the route is
// logged once, the counts once per 10 s). 12 rounds, each running the
// three in turn: dialer+logger / dialer, median of the per-round ratios,
// 0.996 (single rounds 0.71-1.26); 42 allocs and 2,636 B an op in both.
func BenchmarkDialReady(b *testing.B) {
	ready := make(chan struct{})
	close(ready)
	port := acceptAndClose(b)
	ctx := context.Background()
	for _, logged := range []bool{false, true} {
		name, cfg := "dialer", dialer.Config{LocalPort: port, LocalReady: ready}
		if logged {
			name, cfg.Logger = "dialer+logger", slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		d, err := dialer.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				conn, _, err := d.Dial(ctx)
				if err != nil {
					b.Fatal(err)
				}
				conn.Close()
			}
		})
	}
	b.Run("net.Dialer", func(b *testing.B) {
		b.ReportAllocs()
		var nd net.Dialer
		for b.Loop() {
			conn, err := nd.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
}

// acceptAndClose listens on a loopback port that accepts and closes every
// connection until the benchmark ends, and returns the port.
func acceptAndClose(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	})
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

// BenchmarkTransport is a keep-alive GET on loopback through a Transport
// beside a bare http.Transport to the same server, in the same run: after
// the move (the steady state: one pool, no wrapper) and before it (each
// request counted and its body wrapped).
func BenchmarkTransport(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	run := func(b *testing.B, rt http.RoundTripper, url string) {
		client := &http.Client{Transport: rt}
		defer client.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("http.Transport", func(b *testing.B) {
		run(b, &http.Transport{}, "http://"+ln.Addr().String()+"/")
	})
	b.Run("after-move", func(b *testing.B) {
		ready := make(chan struct{})
		close(ready)
		d, err := dialer.New(dialer.Config{LocalPort: port, LocalReady: ready})
		if err != nil {
			b.Fatal(err)
		}
		tr, err := dialer.NewTransport(d, &http.Transport{})
		if err != nil {
			b.Fatal(err)
		}
		run(b, tr, "http://controller/")
	})
	b.Run("before-move", func(b *testing.B) {
		// A controller whose local server is not ready yet, working
		// through a "peer" (the same server), pays the bookkeeping of
		// the move to come.
		d, err := dialer.New(dialer.Config{
			LocalPort:       1, // never dialled: LocalReady stays open
			Remote:          func() []string { return []string{ln.Addr().String()} },
			LocalReady:      make(chan struct{}),
			LocalReadyGrace: time.Nanosecond,
		})
		if err != nil {
			b.Fatal(err)
		}
		tr, err := dialer.NewTransport(d, &http.Transport{})
		if err != nil {
			b.Fatal(err)
		}
		run(b, tr, "http://controller/")
	})
}
