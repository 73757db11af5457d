package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/juju/clock"
	"golang.org/x/time/rate"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/listener"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

// leaseName is the singular lease the controllers compete for.
const leaseName = "singular-controller"

// agentVersion is the version every controller runs and wants; the
// available binaries below include it for the host's platform.
var agentVersion = binaries.Version{Major: 4, Minor: 2, Patch: 1}

// controller is one simulated HA controller: a gated dual listener, a
// self-dialling API client, an upgrade gate, and a lease tracker, composed
// with gates on a board.
type controller struct {
	name string
	o    options
	tl   *timeline
	clk  clock.Clock

	ln      *listener.Listener
	mux     *http.ServeMux // the routes of both ports; readiness endpoints go here and in upgradeAllowlist
	srv     *http.Server
	served  chan struct{} // closed when Serve returns
	up      *upgrade.Gate
	dial    *dialer.Dialer
	faults  *leasetest.FaultStore
	tracker *lease.Tracker

	board                                        *gate.Board
	serving, selfDialed, leaseKnown, stable, api *gate.Lock
	workers                                      *gate.Lock // the call refused during the upgrade went through

	// callRefused is closed when the upgrade gate first refuses the
	// controller's own call; the upgrade completes only after that, so
	// that every run shows a refused call going through (see runUpgrade).
	callRefused     chan struct{}
	callRefusedOnce sync.Once
	// upgradeHold, when not nil, also holds the upgrade's completion until
	// it closes: the main job probes one controller's /readyz first.
	upgradeHold <-chan struct{}

	ctrlAddr string // the controller port's real address, set in newController

	mu           sync.Mutex
	apiAddr      string         // the API port's real address, from OnBound (again on each OpenAPI)
	earlyAPI     int            // API conns that arrived while stable was still locked: must stay 0
	routes       []dialer.Route // every self-dial
	selfRefused  int            // self calls refused with "upgrade in progress" and retried
	apiAccepts   []time.Time    // when each API-port conn reached the server
	stableAfter  time.Duration
	status       lease.Status // first definitive lease status
	leaseErr     error
	leadRuns     int           // runs of the singular worker (under Lead)
	leadStop     error         // why the lease ended a run, if it did (not Close)
	upgradeAtAPI upgrade.Phase // the upgrade's phase when the api port opened
}

// apiHost returns the loopback address for controller i's API port: one of
// its own (127.0.0.2, 127.0.0.3, ...) where the host routes 127.0.0.0/8 to
// loopback, as Linux does, else 127.0.0.1. The API port is bound once to
// learn its number and then released until OpenAPI; on an address nothing
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
	name    string
	apiAddr string // where to bind the API port, e.g. "127.0.0.2:0"
	o       options
	tl      *timeline
	store   lease.Store
	peers   func() []string // the other controllers' controller ports
	// upgradeHold, when not nil, holds the upgrade's completion until it
	// closes (see controller.upgradeHold).
	upgradeHold <-chan struct{}
}

// newController binds the controller's ports (closing the API port again at
// once: agents are refused until it is stable), starts its lease tracker,
// and serves the controller port: /readyz answers from then on, the other
// routes once the server is up (the serving gate). On error it releases
// whatever it had bound.
func newController(cfg controllerConfig) (_ *controller, err error) {
	c := &controller{
		name: cfg.name, o: cfg.o, tl: cfg.tl, clk: clock.WallClock,
		callRefused: make(chan struct{}), upgradeHold: cfg.upgradeHold, served: make(chan struct{}),
	}
	c.up = upgrade.NewGate(upgrade.GateConfig{Clock: c.clk})
	c.up.OnTransition(func(from, to upgrade.Phase, err error) {
		if err != nil {
			c.tl.log(c.name, "upgrade %s -> %s: %v", from, to, err)
			return
		}
		c.tl.log(c.name, "upgrade %s -> %s", from, to)
	})
	c.newBoard()
	c.mux = c.newMux()
	c.srv = c.newServer(c.mux)
	// From here on each step holds something: undo them all on error.
	defer func() {
		if err != nil {
			c.abandon()
			if c.ln != nil {
				_ = c.ln.Close()
			}
		}
	}()
	if c.ln, err = c.listen(cfg.apiAddr); err != nil {
		return nil, err
	}
	if c.dial, err = c.newDialer(cfg.peers); err != nil {
		return nil, err
	}
	c.faults = leasetest.NewFaultStore(cfg.store, leasetest.FaultStoreConfig{Clock: c.clk})
	c.tracker, err = lease.NewTracker(lease.Config{
		Store:    c.faults,
		Name:     leaseName,
		Holder:   c.name,
		Duration: c.o.leaseTerm,
		Clock:    c.clk,
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(c.served)
		_ = c.srv.Serve(c.ln)
	}()
	return c, nil
}

// newBoard makes the controller's gates: stable is all of serving,
// self-dial, upgrade and lease; the API port opens after it. The upgrade
// gate is on the board through its own channels (no state copied by hand),
// and stable is built on the board's entry for them, so it opens after the
// upgrade, and fails with it.
func (c *controller) newBoard() {
	c.board = gate.NewBoard(gate.BoardConfig{Clock: c.clk})
	c.serving = c.board.New("serving")
	c.selfDialed = c.board.New("self-dial")
	upgraded := c.board.Watch("upgrade", c.up.Completed(), c.up.Failed())
	c.leaseKnown = c.board.New("lease")
	c.stable = gate.AllOf("stable", c.serving, c.selfDialed, upgraded, c.leaseKnown)
	c.board.Add(c.stable)
	c.api = c.board.New("api-port")
	c.workers = c.board.New("workers")
}

// listen binds the controller port and the API port, and closes the API
// port again until the controller is stable.
func (c *controller) listen(apiAddr string) (*listener.Listener, error) {
	ln, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        apiAddr,
		APIRate:        rate.Limit(c.o.apiRate),
		APIBurst:       c.o.apiBurst,
		// Bind the API port once to learn its number (agents need it),
		// then close it at once: agents are refused until it reopens.
		BindAPIEarly: true,
		Clock:        c.clk,
		OnBound: func(p listener.Port, addr net.Addr) {
			c.tl.log(c.name, "%s port bound at %s", p, addr)
			if p == listener.API {
				// OpenAPI reports it again while agents may be starting.
				c.mu.Lock()
				c.apiAddr = addr.String()
				c.mu.Unlock()
			} else {
				c.ctrlAddr = addr.String()
			}
		},
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

// newDialer returns the dialer of the controller's own API client: local
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
	})
}

// newMux returns the controller's routes. Agents log in on the API port;
// the controller calls itself on the controller port; a probe reads the
// board at /readyz.
func (c *controller) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", c.board.Handler())
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	mux.Handle("GET /ready", upgrade.ReadyHandler(c.up))
	mux.HandleFunc("POST /controller/workers", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "started")
	})
	mux.HandleFunc("GET /agent/login", func(w http.ResponseWriter, r *http.Request) {
		if listener.PortFromContext(r.Context()) != listener.API {
			http.Error(w, "agents log in on the API port", http.StatusForbidden)
			return
		}
		io.WriteString(w, "welcome")
	})
	return mux
}

// upgradeAllowlist says which calls the upgrade gate lets through while it
// refuses: the liveness and readiness endpoints.
func upgradeAllowlist(r *http.Request) bool {
	switch r.URL.Path {
	case "/ping", "/ready", "/readyz":
		return true
	}
	return false
}

// whenServing answers 503 to everything but /readyz until the serving gate
// opens: the port accepts from the start, so a probe can read a controller
// that is still starting, but its server comes up only later.
func (c *controller) whenServing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" && !c.serving.IsUnlocked() {
			http.Error(w, "server starting", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// newServer serves mux behind the upgrade gate, and records when each API
// connection arrives (and whether the controller was stable by then).
func (c *controller) newServer(mux *http.ServeMux) *http.Server {
	return &http.Server{
		Handler:           c.whenServing(upgrade.Middleware(c.up, upgradeAllowlist)(mux)),
		ConnContext:       listener.ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(conn net.Conn, s http.ConnState) {
			if s == http.StateNew && listener.PortOf(conn) == listener.API {
				// Exact, not timed: stable's state is set before Wait
				// returns, so before OpenAPI can run when the order is right.
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
// the API client starts at once and must wait for it, not dial a peer.
func (c *controller) start(ctx context.Context, serveAfter time.Duration) {
	startedAt := c.tl.since()
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	run(func() { c.selfClient(ctx) })
	run(func() { c.runUpgrade(ctx) })
	run(func() { c.followLease(ctx) })
	run(func() { c.leadSingular(ctx) })
	run(func() {
		if !c.pause(ctx, serveAfter) {
			return
		}
		c.tl.log(c.name, "server up: serving every route on the controller port")
		c.serving.Unlock()
	})

	if err := gate.Wait(ctx, c.stable); err == nil {
		c.mu.Lock()
		c.stableAfter = c.tl.since() - startedAt
		c.upgradeAtAPI = c.up.Report().Phase
		c.mu.Unlock()
		if err := c.ln.OpenAPI(); err != nil {
			c.api.Fail(err)
			c.tl.log(c.name, "cannot open the api port: %v", err)
		} else {
			c.api.Unlock()
			c.tl.log(c.name, "stable after %v: api port open, %g conn/s, burst %d",
				c.stableAfter.Round(time.Millisecond), c.o.apiRate, c.o.apiBurst)
		}
	}
	<-ctx.Done()
	wg.Wait()
}

// selfClient is the controller's own API client: every connection goes
// through the dialer, which waits for the local server rather than dial a
// peer. It makes one allowlisted call, then a call the upgrade gate refuses
// until the upgrade completes, retried with upgrade.Retry.
func (c *controller) selfClient(ctx context.Context) {
	c.tl.log(c.name, "api client starting: waiting for the local server (not dialling a peer)")
	client := c.selfHTTPClient()
	defer client.CloseIdleConnections()
	call := func(ctx context.Context, method, path string) error {
		return httpCall(ctx, client, method, "http://controller"+path)
	}

	if err := call(ctx, "GET", "/ping"); err != nil {
		c.selfDialed.Fail(err)
		return
	}
	c.selfDialed.Unlock()

	err := upgrade.Retry(ctx, func(ctx context.Context) error {
		return call(ctx, "POST", "/controller/workers")
	},
		// One client, not a herd: a cap of 100ms keeps the jitter added to
		// the gate's Retry-After small, so the retry comes soon after it.
		upgrade.WithBackoff(50*time.Millisecond, 100*time.Millisecond),
		upgrade.WithNotify(func(attempt int, err error, wait time.Duration) {
			c.mu.Lock()
			c.selfRefused++
			c.mu.Unlock()
			if attempt == 1 {
				c.tl.log(c.name, "POST /controller/workers refused (%v): retrying in %v", err, wait.Round(time.Millisecond))
			}
			c.callRefusedOnce.Do(func() { close(c.callRefused) })
		}), upgrade.WithClock(c.clk))
	if err != nil {
		c.workers.Fail(err)
		return
	}
	c.tl.log(c.name, "POST /controller/workers accepted once the upgrade completed")
	c.workers.Unlock()
}

// selfHTTPClient returns an HTTP client that dials through the controller's
// dialer and records every route it took.
func (c *controller) selfHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, route, err := c.dial.Dial(ctx)
			if err == nil {
				c.mu.Lock()
				c.routes = append(c.routes, route)
				first := len(c.routes) == 1
				c.mu.Unlock()
				if first {
					c.tl.log(c.name, "self-dial -> %s (local: %t)", route.Addr, route.Local)
				}
			}
			return conn, err
		},
	}}
}

// runUpgrade checks that no agent binary upgrade is needed, then runs the
// (simulated) upgrade steps; the gate refuses non-allowlisted calls
// meanwhile. The steps end no earlier than the gate's first refusal of the
// controller's own call: a real upgrade would not wait for that, but the
// demo must show a refused call in every run, and timing alone (a server
// that comes up late, a slow self-dial) sometimes let the call arrive after
// the upgrade. Likewise they end no earlier than upgradeHold closes, so
// that the main job's probe shows the controller waiting on its upgrade.
// Its state reaches the board and stable through the gate's own channels.
func (c *controller) runUpgrade(ctx context.Context) {
	if !c.pause(ctx, c.o.checking) {
		return
	}
	platform := binaries.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	available := []binaries.Binary{
		{Version: binaries.Version{Major: 4, Minor: 2}, Platform: platform},
		{Version: agentVersion, Platform: platform},
		{Version: agentVersion, Platform: binaries.Platform{OS: "linux", Arch: "s390x"}},
	}
	b, err := binaries.Match(available, agentVersion, platform)
	if err != nil {
		c.up.Fail(err)
		return
	}
	c.tl.log(c.name, "agent binary %s for %s is the one running: no restart needed", b.Version, b.Platform)
	if err := c.up.Enter(upgrade.RunningSteps); err != nil {
		c.up.Fail(err)
		return
	}
	if !c.pause(ctx, c.o.steps) || !closed(ctx, c.callRefused) || !closed(ctx, c.upgradeHold) {
		return
	}
	c.up.Complete()
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

// followLease waits for the tracker's first definitive answer.
func (c *controller) followLease(ctx context.Context) {
	for {
		st, changed := c.tracker.Current()
		if st.State != lease.Unknown {
			_, err := c.tracker.Check(ctx, 0)
			c.mu.Lock()
			c.status, c.leaseErr = st, err
			c.mu.Unlock()
			if st.State == lease.Held {
				c.tl.log(c.name, "lease %q held (token %d, valid for %v)", leaseName, st.Token, time.Until(st.Until).Round(time.Millisecond))
			} else {
				c.tl.log(c.name, "%v", err)
			}
			c.leaseKnown.Unlock()
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
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

// shutdown stops serving, waits for Serve to return and releases the lease
// tracker; it is idempotent.
func (c *controller) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.srv.Shutdown(ctx)
	_ = c.ln.Close()
	<-c.served
	_ = c.tracker.Close()
	c.abandon()
}

// errShutdown ends what a controller still waited on when it shut down.
var errShutdown = errors.New("controller shut down")

// abandon fails the upgrade epoch if it is still open (a no-op once it
// ended), so that the goroutine the board's Watch keeps on its channels
// ends; stable, built on that entry, fails with it.
func (c *controller) abandon() {
	c.up.Fail(errShutdown)
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

// httpCall makes one request and turns the answer into an error: a
// refusal by an upgrade gate (which matches upgrade.ErrUpgradeInProgress and
// was not executed), any other non-200 status, or a transport error.
func httpCall(ctx context.Context, client *http.Client, method, url string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := upgrade.ErrorFromResponse(resp); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return nil
}
