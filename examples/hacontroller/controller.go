package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/juju/clock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/listener"
	"github.com/coldstart-go/coldstart/metrics"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/binaries"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// leaseName is the singular lease the controllers compete for.
const leaseName = "singular-controller"

// agentVersion is the version every controller runs and wants; the
// available binaries below include it for the host's platform.
var agentVersion = binaries.Version{Major: 4, Minor: 2, Patch: 1}

// controller is one simulated HA controller: a gated dual listener serving
// HTTP and gRPC, a self-dialling API client, an upgrade gate, and a lease
// tracker, composed with gates on a board.
type controller struct {
	name string
	o    options
	tl   *timeline
	clk  clock.Clock
	log  *slog.Logger // nil: no logs

	ln      *listener.Listener
	mux     *http.ServeMux // the HTTP routes of both ports
	grpc    *grpc.Server   // the gRPC services, on the same ports
	health  *health.Server // NOT_SERVING once the controller drains
	srv     *http.Server
	served  chan struct{} // closed when Serve returns
	up      *upgrade.Gate
	dial    *dialer.Dialer
	faults  *leasetest.FaultStore
	tracker *lease.Tracker
	metrics *prometheus.Registry // served at /metrics

	board                                        *gate.Board
	serving, selfDialed, leaseKnown, stable, api *gate.Lock
	upgraded                                     *gate.Lock // the board's entry for up
	workers                                      *gate.Lock // the calls refused during the upgrade went through

	// calls are the controller's own calls off the upgrade allowlist; the
	// upgrade completes only once each has been refused (see runUpgrade).
	calls []*selfCall
	// upgradeHold, when not nil, also holds the upgrade's completion until
	// it closes: the main job probes one controller's /readyz first.
	upgradeHold <-chan struct{}

	ctrlAddr string // the controller port's real address, set in newController
	version  binaries.Version
	steps    *stepRecord // the group's upgrade steps' runs (-rolling)
	store    leasestore.Store
	// drainCh, closed by drain, drains the board; refusing is closed once
	// the upgrade gate refuses calls for the drain.
	drainCh, refusing chan struct{}
	// stopRun ends the run start began (set by whoever starts it).
	stopRun context.CancelFunc

	mu           sync.Mutex
	apiAddr      string      // the API port's real address, from OnBound (again when it opens)
	apiBinds     int         // OnBound calls for the API port: the first is the early bind
	earlyAPI     int         // API conns that arrived while stable was still locked: must stay 0
	apiAccepts   []time.Time // when each API-port conn reached the server
	startedAt    time.Time   // when start began
	status       lease.Status
	leaseErr     error // first definitive lease answer
	leadRuns     int   // runs of the singular worker (under Lead)
	leadStop     error // why the lease ended a run, if it did (not Close)
	upgradeAtAPI upgrade.Phase
}

// apiHost returns the loopback address for controller i's API port: one of
// its own (127.0.0.2, 127.0.0.3, ...) where the host routes 127.0.0.0/8 to
// loopback, as Linux does, else 127.0.0.1. The API port is bound once to
// learn its number and then released until it opens; on an address nothing
// else binds, no other socket (another controller's port, a parallel test)
// can take the number meanwhile — on a shared 127.0.0.1 that happened.
func apiHost(i int) string {
	host := fmt.Sprintf("127.0.0.%d", 2+i)
	if ln, err := net.Listen("tcp", net.JoinHostPort(host, "0")); err == nil {
		ln.Close()
		return host
	}
	return "127.0.0.1"
}

// controllerConfig is what newController needs.
type controllerConfig struct {
	name     string
	ctrlAddr string // where to bind the controller port, e.g. "127.0.0.1:0"
	apiAddr  string // where to bind the API port, e.g. "127.0.0.2:0"
	version  binaries.Version
	o        options
	tl       *timeline
	log      *slog.Logger // nil: no logs
	store    leasestore.Store
	peers    func() []string // the other controllers' controller ports
	// bound, if not nil, is told the real addresses of the controller
	// port and the API port once both are bound.
	bound func(ctrl, api string)
	// steps records the runs of the group's upgrade steps (-rolling).
	steps *stepRecord
	// upgradeHold, when not nil, holds the upgrade's completion until it
	// closes (see controller.upgradeHold).
	upgradeHold <-chan struct{}
}

// newController binds the controller's ports (closing the API port again at
// once: agents are refused until it is stable, when it opens by itself),
// starts its lease tracker, and serves the controller port: /readyz answers
// from then on, the other routes once the server is up (the serving gate).
// On error it releases whatever it had bound.
func newController(cfg controllerConfig) (_ *controller, err error) {
	c := &controller{
		name: cfg.name, o: cfg.o, tl: cfg.tl, clk: clock.WallClock, log: cfg.log,
		upgradeHold: cfg.upgradeHold, served: make(chan struct{}), version: cfg.version, steps: cfg.steps,
		store: cfg.store, drainCh: make(chan struct{}), refusing: make(chan struct{}),
		calls: []*selfCall{newSelfCall("POST /controller/workers"), newSelfCall("grpc Health/List"), newSelfCall("grpc Health/Watch")},
	}
	// The board first: it drains when drainCh closes, and the upgrade
	// gate refuses calls once it has and a grace has passed (start).
	c.board = gate.NewBoard(gate.BoardConfig{Name: c.name, Clock: c.clk, Logger: c.log, Drain: c.drainCh})
	c.up = upgrade.NewGate(upgrade.GateConfig{Clock: c.clk, Logger: c.log,
		PeerReady: func() bool { return peerReady(cfg.peers()) },
		OnTransition: func(from, to upgrade.Phase, err error) {
			if to == upgrade.PhaseDraining {
				c.health.Shutdown() // gRPC clients see NOT_SERVING
				close(c.refusing)
			}
			if err != nil { // the timeline's story; Logger has the records
				c.tl.log(c.name, "upgrade %s -> %s: %v", from, to, err)
				return
			}
			c.tl.log(c.name, "upgrade %s -> %s", from, to)
		}})
	c.faults = leasetest.NewFaultStore(cfg.store, leasetest.FaultStoreConfig{Clock: c.clk})
	c.tracker, err = lease.NewTracker(lease.Config{
		Store:    c.faults,
		Name:     leaseName,
		Holder:   c.name,
		Duration: c.o.leaseTerm,
		Clock:    c.clk,
		Logger:   c.log,
	})
	if err != nil {
		_ = c.board.Close()
		return nil, err
	}
	// From here on each step holds something: undo them all on error.
	defer func() {
		if err != nil {
			_ = c.board.Close()
			_ = c.tracker.Close()
			if c.ln != nil {
				_ = c.ln.Close()
			}
		}
	}()
	c.serving = gate.New("serving")
	if c.ln, err = c.listen(cfg.ctrlAddr, cfg.apiAddr); err != nil {
		return nil, err
	}
	if cfg.bound != nil {
		cfg.bound(c.ctrlAddr, c.apiAddress())
	}
	if c.dial, err = c.newDialer(cfg.peers); err != nil {
		return nil, err
	}
	c.fillBoard()
	// The API port opens by itself once stable, and is on the board as it
	// is (a gate.Component).
	if err = c.ln.OpenAPIWhen("stable", c.stable.Unlocked()); err != nil {
		return nil, err
	}
	c.api = c.board.Follow("api-port", c.ln).After(c.stable)
	c.workers = gate.New("workers").After(c.selfDialed, c.upgraded)
	c.board.Add("workers", c.workers)
	c.metrics = prometheus.NewRegistry()
	c.mux, c.grpc = c.newMux(), c.newGRPC()
	c.srv = c.newServer()
	if err := c.registerMetrics(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.served)
		_ = c.srv.Serve(c.ln)
	}()
	return c, nil
}

// fillBoard makes the controller's gates: stable is all of serving,
// self-dial, upgrade and lease. The dialer, the upgrade gate and the lease
// tracker join the board with Follow, so their entries show what each
// waits for (the local server, the phase, why the lease is unknown) while
// locked and the cause if they fail, with no state copied by hand; stable
// is built on those entries, so it opens after them, and fails with them.
// The api-port and workers entries are added once stable exists
// (newController); After tells the timeline what each waited for.
func (c *controller) fillBoard() {
	c.board.Add("serving", c.serving)
	// Open at the dialer's first local connection once serving: no ping.
	c.selfDialed = c.board.Follow("self-dial", c.dial).After(c.serving)
	// The demo's upgrade steps end only once the upgrade gate has refused
	// the controller's own calls (runUpgrade), made after its self-dial.
	c.upgraded = c.board.Follow("upgrade", c.up).After(c.selfDialed)
	c.leaseKnown = c.board.Follow("lease", c.tracker) // opens once it knows who leads
	c.stable = gate.AllOf("stable", c.serving, c.selfDialed, c.upgraded, c.leaseKnown)
	c.board.Add("stable", c.stable)
}

// listen binds the controller port and the API port, and closes the API
// port again until the controller is stable: OpenAPIWhen opens it then
// (newController), with no goroutine of ours.
func (c *controller) listen(ctrlAddr, apiAddr string) (*listener.Listener, error) {
	ln, err := listener.New(listener.Config{
		ControllerAddr: ctrlAddr,
		APIAddr:        apiAddr,
		APIRate:        rate.Limit(c.o.apiRate),
		APIBurst:       c.o.apiBurst,
		// Bind the API port once to learn its number (agents need it),
		// then close it at once: agents are refused until it reopens.
		BindAPIEarly: true,
		Clock:        c.clk,
		Logger:       c.log,
		OnBound:      c.bound,
	})
	if err != nil {
		return nil, err
	}
	if err := ln.CloseAPI(); err != nil {
		_ = ln.Close()
		return nil, err
	}
	c.tl.log(c.name, "api port closed until stable: agents are refused")
	return ln, nil
}

// bound is the listener's OnBound. The API port's second bind is the one
// OpenAPIWhen makes once stable has opened: it records the upgrade's phase
// then, which must be complete.
func (c *controller) bound(p listener.Port, addr net.Addr) {
	if p == listener.Controller {
		c.ctrlAddr = addr.String()
		c.tl.log(c.name, "controller port bound at %s", addr)
		return
	}
	c.mu.Lock()
	c.apiAddr = addr.String()
	c.apiBinds++
	opening := c.apiBinds > 1
	if opening {
		c.upgradeAtAPI = c.up.Phase()
	}
	startedAt := c.startedAt
	c.mu.Unlock()
	if !opening {
		c.tl.log(c.name, "api port bound at %s", addr)
		return
	}
	c.tl.log(c.name, "stable after %v: api port open at %s (OpenAPIWhen), %g conn/s, burst %d",
		time.Since(startedAt).Round(time.Millisecond), addr, c.o.apiRate, c.o.apiBurst)
}

// newDialer returns the dialer of the controller's own API clients: local
// only once the controller port is serving.
func (c *controller) newDialer(peers func() []string) (*dialer.Dialer, error) {
	_, port, err := net.SplitHostPort(c.ctrlAddr)
	if err != nil {
		return nil, err
	}
	localPort, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	return dialer.New(dialer.Config{
		LocalPort:       localPort,
		Remote:          peers,
		Policy:          dialer.RequireLocalWhenReady,
		LocalReady:      c.serving.Unlocked(),
		LocalReadyGrace: 5 * time.Second,
		Clock:           c.clk,
		Logger:          c.log,
	})
}

// newMux returns the controller's HTTP routes. Agents log in on the API
// port; the controller calls itself on the controller port; a probe reads
// the board at /readyz, whether the lease's renewer is stuck at /livez,
// its history at /timeline, and every component's counters at /metrics.
func (c *controller) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", boardview.ReadyHandler(c.board))
	mux.Handle("GET /livez", boardview.LiveHandler(map[string]func() error{"lease": c.tracker.Alive}))
	mux.Handle("GET /timeline", boardview.TimelineHandler(c.board))
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	mux.Handle("GET /ready", upgrade.ReadyHandler(c.up))
	mux.HandleFunc("POST /controller/workers", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "started")
	})
	for path, answer := range map[string]string{"GET /agent/login": "welcome", "GET /agent/ping": "pong"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if listener.PortFromContext(r.Context()) != listener.API {
				http.Error(w, "agents call on the API port", http.StatusForbidden)
				return
			}
			io.WriteString(w, answer)
		})
	}
	return mux
}

// registerMetrics puts every component on the controller's registry, each
// collector reading its component's Report at scrape time; the leader
// gauge is client-go's, so dashboards written for Kubernetes controllers
// show which controller leads.
func (c *controller) registerMetrics() error {
	for _, col := range []prometheus.Collector{
		metrics.NewBoardCollector(c.name, c.board),
		metrics.NewListenerCollector(c.name, c.ln),
		metrics.NewDialerCollector(c.name, c.dial),
		metrics.NewTrackerCollector(c.tracker),
		metrics.NewLeaderStatusCollector(c.tracker),
		metrics.NewUpgradeCollector(c.name, c.up),
		metrics.NewStoreCollector(c.name, c.faults),
	} {
		if err := c.metrics.Register(col); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// newGRPC returns the controller's gRPC server, behind the same upgrade
// gate: the health Check is allowlisted, List and Watch are refused until
// the upgrade completes; the health service says NOT_SERVING once the
// gate drains.
func (c *controller) newGRPC() *grpc.Server {
	allow := grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName)
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcupgrade.UnaryServerInterceptor(c.up, allow)),
		grpc.StreamInterceptor(grpcupgrade.StreamServerInterceptor(c.up, allow)),
	)
	c.health = health.NewServer()
	healthpb.RegisterHealthServer(srv, c.health)
	return srv
}

// observability is what a probe reads in every phase, on either port.
func observability(path string) bool {
	switch path {
	case "/readyz", "/timeline", "/metrics":
		return true
	}
	return false
}

// upgradeAllowlist says which calls the upgrade gate lets through while it
// refuses: the liveness and readiness endpoints, the timeline and the
// metrics.
func upgradeAllowlist(r *http.Request) bool {
	return observability(r.URL.Path) || r.URL.Path == "/ping" || r.URL.Path == "/ready"
}

// handler serves gRPC (HTTP/2 with a gRPC content type) and the HTTP mux
// on one listener, both behind the upgrade gate, and answers 503 to
// everything but the observability endpoints until the serving gate opens:
// the port accepts from the start, so a probe can read a controller that
// is still starting, but its server comes up only later.
func (c *controller) handler() http.Handler {
	web := upgrade.Middleware(c.up, upgradeAllowlist)(c.mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !observability(r.URL.Path) && !c.serving.IsUnlocked() {
			http.Error(w, "server starting", http.StatusServiceUnavailable)
			return
		}
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			c.grpc.ServeHTTP(w, r)
			return
		}
		web.ServeHTTP(w, r)
	})
}

// newServer serves handler over HTTP/1.1 and h2c (gRPC over plain TCP),
// and records when each API connection arrives (and whether the
// controller was stable by then).
func (c *controller) newServer() *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           c.handler(),
		Protocols:         &protocols,
		ConnContext:       listener.ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(conn net.Conn, s http.ConnState) {
			if s == http.StateNew && listener.PortOf(conn) == listener.API {
				// Exact, not timed: stable's state is set before its
				// Unlocked channel closes, so before the API port opens.
				early := !c.stable.IsUnlocked()
				c.mu.Lock()
				c.apiAccepts = append(c.apiAccepts, time.Now())
				if early {
					c.earlyAPI++
				}
				c.mu.Unlock()
			}
		},
	}
}

// start runs the controller's startup; it returns when ctx ends. serveAfter
// stands for the time the server takes to come up (a state store starting):
// the API clients start at once and must wait for it, not dial a peer. The
// API port opens by itself once stable (Listener.OpenAPIWhen).
func (c *controller) start(ctx context.Context, serveAfter time.Duration) {
	c.mu.Lock()
	c.startedAt = time.Now()
	c.mu.Unlock()
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	run(func() { c.selfClient(ctx) })
	run(func() { // the timeline's story: the board follows the dialer itself
		if closed(ctx, c.selfDialed.Unlocked()) {
			c.tl.log(c.name, "self-dial: the dialer moved home (local server, no ping)")
		}
	})
	run(func() { c.runUpgrade(ctx) })
	run(func() { _ = c.up.Drain(ctx, c.board.Draining(), drainGrace) })
	run(func() { c.followLease(ctx) })
	run(func() { c.leadSingular(ctx) })
	run(func() {
		if !c.pause(ctx, serveAfter) {
			return
		}
		c.tl.log(c.name, "server up: serving HTTP and gRPC on the controller port")
		c.serving.Unlock()
	})
	<-ctx.Done()
	wg.Wait()
}

// runUpgrade checks that no agent binary upgrade is needed, then runs the
// (simulated) upgrade steps with RunSteps: the gate refuses calls off the
// allowlist meanwhile, completes when the steps return nil, and stays in
// progress (not failed) if ctx ends first. The steps end no earlier than
// the gate's first refusal of each of the controller's own calls: a real
// upgrade would not wait for that, but the demo must show refused calls in
// every run, and timing alone (a server that comes up late, a slow
// self-dial) sometimes let a call arrive after the upgrade. Likewise they
// end no earlier than upgradeHold closes, so that the main job's probe
// shows the controller waiting on its upgrade.
func (c *controller) runUpgrade(ctx context.Context) {
	if !c.pause(ctx, c.o.checking) {
		return
	}
	platform := binaries.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	available := []binaries.Binary{
		{Version: binaries.Version{Major: 4, Minor: 2}, Platform: platform},
		{Version: agentVersion, Platform: platform},
		{Version: newVersion, Platform: platform},
		{Version: agentVersion, Platform: binaries.Platform{OS: "linux", Arch: "s390x"}},
	}
	b, err := binaries.Match(available, c.version, platform)
	if err != nil {
		c.up.Fail(err)
		return
	}
	c.tl.log(c.name, "agent binary %s for %s is the one running: no restart needed", b.Version, b.Platform)
	if c.version == newVersion {
		c.runGroupUpgrade(ctx)
		return
	}
	_ = c.up.RunSteps(ctx, func(ctx context.Context) error {
		if !c.pause(ctx, c.o.steps) || !c.allRefused(ctx) || !closed(ctx, c.upgradeHold) {
			return ctx.Err()
		}
		return nil
	})
}

// allRefused waits until each of the controller's own calls has been
// refused once; it reports false if ctx ended first.
func (c *controller) allRefused(ctx context.Context) bool {
	for _, call := range c.calls {
		if !closed(ctx, call.refused) {
			return false
		}
	}
	return true
}

// closed waits for ch to close (a nil ch is no wait at all); it reports
// false if ctx ended first.
func closed(ctx context.Context, ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause waits d on the controller's clock; it reports false if ctx ended
// first.
func (c *controller) pause(ctx context.Context, d time.Duration) bool {
	return backoff.Sleep(ctx, c.clk, d) == nil
}

// followLease records the tracker's first definitive answer, once the
// board's lease entry has opened.
func (c *controller) followLease(ctx context.Context) {
	select {
	case <-c.leaseKnown.Unlocked():
	case <-ctx.Done():
		return
	}
	st, err := c.tracker.Check(ctx, 0)
	c.mu.Lock()
	c.status, c.leaseErr = st, err
	c.mu.Unlock()
	if st.State == lease.Held {
		c.tl.log(c.name, "lease %q held (token %d, valid for %v)", leaseName, st.Token, time.Until(st.Until).Round(time.Millisecond))
	} else {
		c.tl.log(c.name, "%v", err)
	}
}

// leadSingular runs the controller's singular worker under Lead: it starts
// each time this controller comes to hold the lease, and its ctx ends the
// moment the lease can no longer be promised — not when a renewal merely
// fails, as during the store fault.
func (c *controller) leadSingular(ctx context.Context) {
	_ = c.tracker.Lead(ctx, func(ctx context.Context, st lease.Status) error {
		c.mu.Lock()
		c.leadRuns++
		c.mu.Unlock()
		c.tl.log(c.name, "singular worker started under Lead (token %d)", st.Token)
		<-ctx.Done() // a real worker works here, fencing with st.Token
		if cause := context.Cause(ctx); errors.Is(cause, lease.ErrNotLeader) || errors.Is(cause, lease.ErrRenewalFailed) {
			c.mu.Lock()
			c.leadStop = cause
			c.mu.Unlock()
			c.tl.log(c.name, "singular worker stopped: %v", cause)
		}
		return nil
	})
}

// apiAddress returns the API port's real address.
func (c *controller) apiAddress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiAddr
}

// shutdown closes the board first (it stops following the listener, the
// upgrade and the lease tracker, so their ends are not startup failures on
// it), stops serving, waits for Serve to return and releases the lease
// tracker; it is idempotent.
func (c *controller) shutdown() {
	_ = c.board.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.srv.Shutdown(ctx)
	c.grpc.Stop()
	_ = c.ln.Close()
	<-c.served
	_ = c.tracker.Close()
}

// acceptRates returns the most API connections that reached the server in
// any window of length w, and the sustained rate from the first to the last
// beyond the first burst (which the limiter lets through at once).
func (c *controller) acceptRates(w time.Duration, burst int) (peak int, sustained float64) {
	c.mu.Lock()
	at := slices.Clone(c.apiAccepts)
	c.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	if n := len(at) - burst; n > 1 {
		sustained = float64(n-1) / at[len(at)-1].Sub(at[burst]).Seconds()
	}
	return most, sustained
}
