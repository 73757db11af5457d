package listener_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/coldstart-go/coldstart/listener"
)

// BenchmarkAccept measures dial+accept+close pairs on loopback through a
// bare net.Listener and through each port of a Listener, side by side.
//
// "pipelined" is accept throughput: a client goroutine keeps up to 16
// dials in flight (as a herd does) while the benchmark goroutine accepts
// and closes. "pingpong" dials, accepts and closes one pair at a time; it
// is latency-bound, and there the Listener pays for the hand-off from its
// port goroutine, which a bare listener accepting in the caller does not.
// "handoff" is that floor on its own: a bare listener behind one accept
// goroutine and an unbuffered channel, the least any design with a
// goroutine per port (DESIGN: so API throttling never delays the
// controller port) can do. cpu-ns/op is process CPU time (user+system,
// every goroutine) per pair; ctxsw/op counts the OS threads' context
// switches per pair (getrusage), the cost the hand-off adds.
//
// Figures: 2-vCPU Firecracker VM (AMD EPYC), Go 1.26, load average 1.5-2.8
// from other sessions; go test -run '^$' -bench BenchmarkAccept -count 5
// ./listener; medians; "vs bare" is bare ns/op ÷ ns/op (throughput ratio):
//
//	                          ns/op  cpu-ns/op  ctxsw/op  B/op  allocs  vs bare
//	pipelined/bare           34 840     55 300      0.24   988      21
//	pipelined/handoff        34 970     62 070      0.16   988      21     1.00
//	pipelined/controller     29 800     52 950      0.13  1036      22     1.17
//	pipelined/api-unlimited  30 610     54 140      0.16  1036      22     1.14
//	pingpong/bare            46 520     45 450      0.02   988      21
//	pingpong/handoff         69 600     68 240      1.43   988      21     0.67
//	pingpong/controller      70 920     66 720      1.44  1036      22     0.66
//	pingpong/api-unlimited   70 700     69 750      2.79  1036      22     0.66
//
// With -cpu 1 (one P, so no second thread to wake) pingpong is at parity:
// fastest of 5 runs bare 48.7 µs, handoff 48.0, controller 48.6,
// api-unlimited 49.5; median CPU 47.1, 46.7, 48.5, 49.3 µs a pair.
//
// pipelined meets the target (≥ 0.95 × bare, CPU ≤ +5 %): the port
// goroutine accepts while the caller closes, so it is at parity or faster.
// pingpong misses it, and the cause is the hand-off, not this package:
// "handoff" (no wrapper, no counters, a two-case select) is as slow as
// controller and api-unlimited; at -cpu 1 all three match bare; and the
// slowdown tracks ctxsw/op: bare's dial and accept stay on one thread,
// while a hand-off wakes the port goroutine on the other vCPU and then
// the caller back (0.3-3 thread sleeps a pair, ~15 µs each in this VM),
// and every socket syscall gets slower running across two vCPUs. The
// Listener's own per-pair work (one 48-byte wrapper, a few atomics, the
// selects) is ~2 µs of CPU (-cpu 1, controller vs handoff). A blocked
// Accept already receives the conn directly: a send on an unbuffered
// channel to a parked receiver copies into it and readies it.
// Tried and rejected, each measured against handoff: a 1-slot buffered
// hand-off, yielding (runtime.Gosched) up to 4 or 16 times before
// blocking, and busy-polling the channel before blocking (worse: 100 µs).
// Letting the caller of Accept accept from the socket itself would remove
// the hand-off only while the API port is closed (a caller cannot block
// on two sockets), and would need every caller parked in the controller
// socket's Accept to be kicked out by a deadline on OpenAPI, or API conns
// would wait for the next controller conn; it was not worth that risk.
func BenchmarkAccept(b *testing.B) {
	for _, mode := range []struct {
		name string
		run  func(*testing.B, net.Listener, net.Addr)
	}{{"pipelined", benchAcceptPipelined}, {"pingpong", benchAcceptPingPong}} {
		b.Run(mode.name+"/bare", func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			mode.run(b, ln, ln.Addr())
		})
		b.Run(mode.name+"/handoff", func(b *testing.B) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ln := newHandoffListener(inner)
			defer ln.Close()
			mode.run(b, ln, inner.Addr())
		})
		b.Run(mode.name+"/controller", func(b *testing.B) {
			l := benchListener(b, listener.Config{})
			mode.run(b, l, l.Addr())
		})
		b.Run(mode.name+"/api-unlimited", func(b *testing.B) {
			l := benchListener(b, listener.Config{})
			if err := l.OpenAPI(); err != nil {
				b.Fatal(err)
			}
			mode.run(b, l, l.APIAddr())
		})
		// With a Logger: the accept path must not touch it (the counts it
		// logs are the atomics Report reads anyway).
		b.Run(mode.name+"/controller+logger", func(b *testing.B) {
			l := benchListener(b, listener.Config{Logger: discardLogger()})
			mode.run(b, l, l.Addr())
		})
		b.Run(mode.name+"/api-unlimited+logger", func(b *testing.B) {
			l := benchListener(b, listener.Config{Logger: discardLogger()})
			if err := l.OpenAPI(); err != nil {
				b.Fatal(err)
			}
			mode.run(b, l, l.APIAddr())
		})
		if mode.name != "pipelined" {
			continue
		}
		// Limited below the pipelined accept rate, so most conns wait for
		// a token and are counted as rate-limited (and, with the logger,
		// logged as a count every 10 s).
		for _, logged := range []bool{false, true} {
			name := "/api-limited"
			cfg := listener.Config{APIRate: benchRate}
			if logged {
				name, cfg.Logger = name+"+logger", discardLogger()
			}
			b.Run(mode.name+name, func(b *testing.B) {
				l := benchListener(b, cfg)
				if err := l.OpenAPI(); err != nil {
					b.Fatal(err)
				}
				mode.run(b, l, l.APIAddr())
				b.ReportMetric(float64(l.Report().API.RateLimited)/float64(b.N), "limited/op")
			})
		}
	}
}

// benchRate is below the pipelined accept rate of the machines this ran on
// (about 30,000/s), so the limit binds.
const benchRate = 10000

// discardLogger formats every record, as a real handler would, and drops it.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// handoffListener is the reference floor: one goroutine accepts from the
// inner listener and hands each conn over an unbuffered channel.
type handoffListener struct {
	net.Listener
	conns        chan net.Conn
	done, exited chan struct{}
}

func newHandoffListener(inner net.Listener) *handoffListener {
	l := &handoffListener{
		Listener: inner, conns: make(chan net.Conn),
		done: make(chan struct{}), exited: make(chan struct{}),
	}
	go func() {
		defer close(l.exited)
		for {
			c, err := inner.Accept()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				_ = c.Close()
				return
			}
		}
	}()
	return l
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	close(l.done)
	err := l.Listener.Close()
	<-l.exited
	return err
}

func benchListener(b *testing.B, cfg listener.Config) *listener.Listener {
	b.Helper()
	l, err := listener.New(loopback(cfg))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// closeAbort closes a client conn with RST: no TIME_WAIT, so the ephemeral
// ports last however long the benchmark runs.
func closeAbort(c net.Conn) {
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.Close()
}

func benchAcceptPingPong(b *testing.B, ln net.Listener, addr net.Addr) {
	b.ReportAllocs()
	target := addr.String()
	u0 := usage()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		closeAbort(c)
		_ = s.Close()
	}
	b.StopTimer()
	usage().sub(u0).report(b)
}

func benchAcceptPipelined(b *testing.B, ln net.Listener, addr net.Addr) {
	b.ReportAllocs()
	target := addr.String()
	dialled := make(chan net.Conn, 16) // bounds the dials in flight
	dialErr := make(chan error, 1)
	u0 := usage()
	b.ResetTimer()
	go func() {
		defer close(dialled)
		for range b.N {
			c, err := net.Dial("tcp", target)
			if err != nil {
				dialErr <- err
				return
			}
			dialled <- c
		}
	}()
	for range b.N {
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		c, ok := <-dialled
		if !ok {
			b.Fatal(<-dialErr)
		}
		closeAbort(c)
	}
	b.StopTimer()
	usage().sub(u0).report(b)
}

// rusage is the process's CPU time and its threads' context switches.
type rusage struct {
	cpu   time.Duration // user + system
	ctxsw int64         // voluntary + involuntary
}

func usage() rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return rusage{}
	}
	return rusage{
		cpu:   time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		ctxsw: int64(ru.Nvcsw + ru.Nivcsw),
	}
}

func (u rusage) sub(v rusage) rusage { return rusage{u.cpu - v.cpu, u.ctxsw - v.ctxsw} }

func (u rusage) report(b *testing.B) {
	b.ReportMetric(float64(u.cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(u.ctxsw)/float64(b.N), "ctxsw/op")
}

var herdAgents = flag.Int("herd.agents", 3000,
	"agents dialling the API port in BenchmarkHerd (or env COLDSTART_HERD_AGENTS)")

const (
	herdRate      = 2000 // API accepts per second
	herdBurst     = 100
	ctrlEvery     = 5 * time.Millisecond // the controller dials its own port this often
	idleDuration  = time.Second
	phaseDeadline = 60 * time.Second
)

// Controller dials come from 127.0.0.2, agents from 127.0.0.1, so the
// server tells them apart even on the shared baseline's single port.
var ctrlSource = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}

// BenchmarkHerd: N agents storm the API port (2,000/s, burst 100) while the
// controller dials its own port every 5ms. It reports the controller's
// time-to-accept (dial start to Accept returning) with no herd (idle-*),
// under the herd (ctrl-*), and under the herd on a baseline of one shared
// listener with the same limiter in Accept (shared-*); the API accept rate
// against the configured one; and peak goroutines (the agents' included)
// and live heap. One iteration takes a few seconds: use -benchtime=1x.
//
// ctrl-* counts the controller dials made once every agent has dialled,
// while the herd sits queued and is admitted at the limit. Dials made while
// the 3,000 in-process agents are still connecting are reported apart
// (arrival-*): on a 2-core host that window measures the harness's own
// connect storm, which in production runs on the agents' machines.
//
// Agents hold their conn until the server closes it, so the process needs
// about N+100 file descriptors (ulimit -n); loopback only.
func BenchmarkHerd(b *testing.B) {
	agents := *herdAgents
	if v, err := strconv.Atoi(os.Getenv("COLDSTART_HERD_AGENTS")); err == nil && v > 0 {
		agents = v
	}
	var idle, dual, shared herdResult
	for range b.N {
		idle = runHerd(b, false, 0)
		dual = runHerd(b, false, agents)
		shared = runHerd(b, true, agents)
	}
	idleP99 := percentile(idle.ctrl, 99)
	herdP99 := percentile(dual.ctrl, 99)
	sharedP99 := percentile(shared.ctrl, 99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(idle.ctrl, 50)), "idle-p50-ms")
	b.ReportMetric(ms(idleP99), "idle-p99-ms")
	b.ReportMetric(ms(percentile(dual.ctrl, 50)), "ctrl-p50-ms")
	b.ReportMetric(ms(herdP99), "ctrl-p99-ms")
	b.ReportMetric(ms(sharedP99), "shared-p99-ms")
	b.ReportMetric(ms(percentile(dual.arrival, 99)), "arrival-p99-ms")
	b.ReportMetric(float64(herdP99)/float64(idleP99), "herd-vs-idle")
	b.ReportMetric(float64(sharedP99)/float64(herdP99), "shared-vs-dual")
	b.ReportMetric(dual.apiRate, "api-rate/s")
	b.ReportMetric(100*math.Abs(dual.apiRate-herdRate)/herdRate, "api-rate-err-%")
	b.ReportMetric(float64(dual.peakGoroutines), "peak-goroutines")
	b.ReportMetric(float64(dual.peakHeap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(len(dual.ctrl)), "ctrl-samples")
	b.ReportMetric(float64(len(dual.arrival)), "arrival-samples")
	b.ReportMetric(float64(agents), "agents")
}

type herdResult struct {
	ctrl           []time.Duration // controller time-to-accept, herd queued
	arrival        []time.Duration // the same while the agents were dialling
	apiRate        float64         // agents accepted per second after the burst
	peakGoroutines int64
	peakHeap       uint64
}

// sharedListener is the baseline: one port for everybody, the limiter in
// Accept, so the controller queues behind throttled agents.
type sharedListener struct {
	net.Listener
	lim *rate.Limiter
}

func (s sharedListener) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := s.lim.Wait(context.Background()); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// runHerd runs one phase: agents dial the API port (none for the idle
// phase) while the controller dials its own port every ctrlEvery; shared
// puts both on one sharedListener instead of a Listener.
func runHerd(b *testing.B, shared bool, agents int) herdResult {
	b.Helper()
	ln, ctrlAddr, apiAddr := herdListener(b, shared)
	srv := serveHerd(ln, agents)
	peaks := samplePeaks()
	herd := dialHerd(b, apiAddr, agents)
	dials := dialController(b, ctrlAddr, herd.arrived, srv.agentsDone, agents)
	herd.wg.Wait()
	r := herdResult{}
	r.peakGoroutines, r.peakHeap = peaks.stop()
	_ = ln.Close()
	<-srv.served
	r.ctrl, r.arrival = matchAccepts(b, dials, srv.ctrlAccepts)
	r.apiRate = apiRate(srv.agentAccepts)
	return r
}

// herdListener returns the phase's listener and the addresses the
// controller and the agents dial: a Listener with its API port open, or
// the shared baseline, where both are the one port.
func herdListener(b *testing.B, shared bool) (ln net.Listener, ctrlAddr, apiAddr string) {
	b.Helper()
	if shared {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := inner.Addr().String()
		return sharedListener{inner, rate.NewLimiter(herdRate, herdBurst)}, addr, addr
	}
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0", APIAddr: "127.0.0.1:0",
		APIRate: herdRate, APIBurst: herdBurst,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.OpenAPI(); err != nil {
		b.Fatal(err)
	}
	return l, l.Addr().String(), l.APIAddr().String()
}

// herdServer accepts, notes when and from whom, and closes at once. Its
// slices belong to its goroutine until served is closed.
type herdServer struct {
	ctrlAccepts  []herdAccept
	agentAccepts []time.Time
	agentsDone   chan struct{} // closed once every agent has been accepted
	served       chan struct{} // closed when the accept loop has returned
}

type herdAccept struct {
	at   time.Time
	from string // the controller dial's local address
}

func serveHerd(ln net.Listener, agents int) *herdServer {
	s := &herdServer{agentsDone: make(chan struct{}), served: make(chan struct{})}
	go func() {
		defer close(s.served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			now := time.Now()
			ra := c.RemoteAddr().(*net.TCPAddr)
			if ra.IP.Equal(ctrlSource.IP) {
				s.ctrlAccepts = append(s.ctrlAccepts, herdAccept{now, ra.String()})
			} else {
				s.agentAccepts = append(s.agentAccepts, now)
				if len(s.agentAccepts) == agents {
					close(s.agentsDone)
				}
			}
			_ = c.Close()
		}
	}()
	return s
}

// peakSampler records peak goroutines and live heap while a phase runs.
type peakSampler struct {
	goroutines int64
	heap       uint64
	quit, done chan struct{}
}

func samplePeaks() *peakSampler {
	p := &peakSampler{quit: make(chan struct{}), done: make(chan struct{})}
	samples := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(samples)
			p.goroutines = max(p.goroutines, int64(samples[0].Value.Uint64()))
			p.heap = max(p.heap, samples[1].Value.Uint64())
			select {
			case <-tick.C:
			case <-p.quit:
				return
			}
		}
	}()
	return p
}

// stop ends the sampling and returns the peaks.
func (p *peakSampler) stop() (goroutines int64, heap uint64) {
	close(p.quit)
	<-p.done
	return p.goroutines, p.heap
}

// herd is the agents of a phase: each dials once and holds its conn until
// the server closes it. arrived is closed once every agent's dial has
// completed, i.e. the whole herd is queued on the API port.
type herd struct {
	wg      sync.WaitGroup
	arrived chan struct{}
}

func dialHerd(b *testing.B, apiAddr string, agents int) *herd {
	h := &herd{arrived: make(chan struct{})}
	if agents == 0 {
		close(h.arrived)
	}
	var dialled atomic.Int64
	dialer := &net.Dialer{Timeout: phaseDeadline}
	for range agents {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			c, err := dialer.Dial("tcp", apiAddr)
			if dialled.Add(1) == int64(agents) {
				close(h.arrived)
			}
			if err != nil {
				b.Error(err)
				return
			}
			holdUntilClosed(c)
		}()
	}
	return h
}

// holdUntilClosed waits (at most phaseDeadline) for the server to close
// c, then closes it.
func holdUntilClosed(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(phaseDeadline))
	_, _ = c.Read(make([]byte, 1))
	_ = c.Close()
}

// ctrlDial is one dial of the controller to its own port.
type ctrlDial struct {
	start   time.Time
	local   string
	arrival bool // dialled while the agents were still dialling
}

// dialController dials the controller port every ctrlEvery until the
// whole herd has been accepted (for idleDuration with no herd), and
// returns once every one of its conns has been accepted and closed.
func dialController(b *testing.B, ctrlAddr string, arrived, herdIn <-chan struct{}, agents int) []ctrlDial {
	b.Helper()
	end := time.After(idleDuration)
	if agents > 0 {
		end = nil
	} else {
		herdIn = nil
	}
	var dials []ctrlDial
	var conns sync.WaitGroup
	dialer := &net.Dialer{LocalAddr: ctrlSource, Timeout: phaseDeadline}
	deadline := time.After(phaseDeadline)
	tick := time.NewTicker(ctrlEvery)
	defer tick.Stop()
	for {
		inArrival := true
		select {
		case <-arrived:
			inArrival = false
		default:
		}
		start := time.Now()
		c, err := dialer.Dial("tcp", ctrlAddr)
		if err != nil {
			b.Fatal(err)
		}
		dials = append(dials, ctrlDial{start, c.LocalAddr().String(), inArrival})
		conns.Add(1)
		go func() {
			defer conns.Done()
			holdUntilClosed(c)
		}()
		select {
		case <-tick.C:
			continue
		case <-end:
		case <-herdIn:
		case <-deadline:
			b.Fatal("herd phase did not finish")
		}
		conns.Wait() // every controller conn has been accepted and closed
		return dials
	}
}

// matchAccepts pairs each controller dial with its accept by the client
// address (the earliest accept at or after the dial, in case a port
// number was reused) and returns the times to accept, split into those
// dialled once the herd was queued and those dialled while it arrived.
func matchAccepts(b *testing.B, dials []ctrlDial, accepts []herdAccept) (ctrl, arrival []time.Duration) {
	b.Helper()
	byAddr := map[string][]time.Time{}
	for _, a := range accepts {
		byAddr[a.from] = append(byAddr[a.from], a.at)
	}
	for _, d := range dials {
		ats := byAddr[d.local]
		i := slices.IndexFunc(ats, func(at time.Time) bool { return !at.Before(d.start) })
		if i < 0 {
			b.Fatalf("controller dial from %s never accepted", d.local)
		}
		if d.arrival {
			arrival = append(arrival, ats[i].Sub(d.start))
		} else {
			ctrl = append(ctrl, ats[i].Sub(d.start))
		}
		byAddr[d.local] = slices.Delete(ats, i, i+1)
	}
	return ctrl, arrival
}

// apiRate is the agents accepted per second once the burst is spent, or 0
// with too few accepts to tell.
func apiRate(accepts []time.Time) float64 {
	n := len(accepts)
	if n <= herdBurst+1 {
		return 0
	}
	span := accepts[n-1].Sub(accepts[herdBurst-1])
	return float64(n-herdBurst) / span.Seconds()
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// BenchmarkAcceptPath is the Listener's own work per connection, without
// the sockets that dominate BenchmarkAccept (and its noise): the inner
// listener hands out a no-op conn at once, so an op is the port
// goroutine's accept, wrap and hand-off, and Accept's receive and Close.
// Each case runs bare and with a Logger; the accept path never calls the
// logger, so the pair should match.
//
// Figures (2 vCPUs shared with other sessions, load 5-8; 15 rounds, each
// running all four cases in turn, so a ratio compares neighbours): the
// median of the per-round ratios logger/bare is 1.002 (controller) and
// 1.008 (api), single rounds ranging 0.6-1.6; 48 B and 1 alloc an op in
// all four. BenchmarkAccept's +logger cases, 10 such rounds: ns/op ratios
// 0.94-1.16 and cpu-ns/op ratios 1.00-1.07 (medians per case, single
// rounds 0.5-2.0: the sockets' noise is larger than any difference), 22
// allocs and 1,036 B an op with and without (api-limited: 1,089 B against
// 1,084, the one record and its timer spread over the run).
func BenchmarkAcceptPath(b *testing.B) {
	for _, port := range []listener.Port{listener.Controller, listener.API} {
		for _, logged := range []bool{false, true} {
			name := port.String()
			cfg := listener.Config{}
			if logged {
				name, cfg.Logger = name+"+logger", discardLogger()
			}
			b.Run(name, func(b *testing.B) {
				fakes := []net.Listener{instantListener{}, nil}
				if port == listener.API {
					fakes = []net.Listener{nil, instantListener{}}
				}
				l, err := listener.NewWithListen(loopback(cfg), (&listenSeq{fakes: fakes}).listen)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				if port == listener.API {
					if err := l.OpenAPI(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					c, err := l.Accept()
					if err != nil {
						b.Fatal(err)
					}
					c.Close()
				}
			})
		}
	}
}

// instantListener accepts a no-op conn at once, until it is closed (it
// never is: the Listener's Close ends the loop by its quit channel, and
// the conn it holds then is closed unserved).
type instantListener struct{}

func (instantListener) Accept() (net.Conn, error) { return nopConn{}, nil }
func (instantListener) Close() error              { return nil }
func (instantListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }

type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
