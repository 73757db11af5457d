// Command hacontroller is coldstart's main job: an HA controller startup
// you can watch. Three controllers and a few thousand agents run in one
// process on loopback ports the kernel picks (nothing else is ever
// dialled). Each controller serves HTTP and gRPC on its dual listener and
// binds its controller port; its own API clients (net/http through
// dialer.NewTransport, gRPC through grpcdialer.NewClient) dial it through
// the dialer, which waits for its own server instead of a peer; it runs
// upgrade steps behind the upgrade gate (Gate.RunSteps), which refuses its
// own calls meanwhile (waited out by upgrade.RetryTransport and
// grpcupgrade's client interceptors); it competes for the singular lease
// and runs its singular worker under Lead; and its rate-limited API port
// opens by itself once all of that is done (Listener.OpenAPIWhen).
// The agents storm the API ports from the start and retry refusals. Midway
// the leader's lease store faults: its checks must say "renewal failed,
// still held", never "not leader".
//
// Every story happens in every run by construction, not by timing: the
// controllers start only once every API port has refused an agent; a
// controller's upgrade steps complete only after the upgrade gate refused
// each of its own calls; the leader's last check during the fault comes
// when its cached promise no longer covers the lease term, so it must
// answer ErrRenewalFailed.
//
// Each controller serves its gate board at /readyz, the board's timeline
// at /timeline and its components' metrics at /metrics on its controller
// port, which accepts from the start: the run prints each readiness
// address, one /readyz?verbose answer taken while the first controller
// still waits (its upgrade completes only after that probe) and one once it
// is stable, and at the end the first controller's critical chain: the
// gates, back from the one that opened last, that made its startup take as
// long as it did.
//
// It prints a timeline and a summary and exits non-zero, naming them, if a
// story did not happen or an invariant broke. -log json (or text) writes
// every component's slog records to stderr. With -hold the controllers
// keep serving after the summary until interrupted, so you can probe them
// with curl. -trace and -svg write the controllers' startup as one trace
// file (Perfetto, chrome://tracing) and one picture, a swimlane each.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

type options struct {
	controllers  int
	agents       int
	apiRate      float64
	apiBurst     int
	serveAfter   time.Duration
	checking     time.Duration
	steps        time.Duration
	leaseTerm    time.Duration
	fault        time.Duration
	agentBackoff time.Duration
	rolling      bool          // after the startup, restart each controller in turn on newVersion
	agentEvery   time.Duration // with -rolling: how often each agent calls
	timeout      time.Duration
	hold         bool
	log          string // "", "json" or "text": slog records to stderr
	trace        string // "": none; else the file the controllers' startup is written to as trace events
	svg          string // "": none; else the file the controllers' startup is drawn to, a swimlane each
}

// The run is bounded in count as well as time: one process, loopback only.
const (
	maxControllers = 9
	maxAgents      = 10000
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("hacontroller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.controllers, "controllers", 3, "number of HA controllers (at most 9)")
	fs.IntVar(&o.agents, "agents", 3000, "number of agents storming the API ports (at most 10000)")
	fs.Float64Var(&o.apiRate, "api-rate", 1000, "accept rate limit of each API port, in connections/s")
	fs.IntVar(&o.apiBurst, "api-burst", 10, "accept burst of each API port (0: the smallest that reaches -api-rate)")
	fs.DurationVar(&o.serveAfter, "serve-after", 150*time.Millisecond, "time the first controller's server takes to come up (each next one takes this much longer)")
	fs.DurationVar(&o.checking, "checking", 100*time.Millisecond, "time spent checking for an agent binary upgrade")
	fs.DurationVar(&o.steps, "steps", 400*time.Millisecond, "time the upgrade steps run (calls off the allowlist are refused meanwhile)")
	fs.DurationVar(&o.leaseTerm, "lease", 500*time.Millisecond, "leadership guarantee of a lease check (leases are claimed for twice this)")
	fs.DurationVar(&o.fault, "fault", 800*time.Millisecond, "how long the leader's lease store times out midway, starting just after a renewal and cut short so the term it holds outlives it (0: no fault; else between 1.2× and 1.7× -lease)")
	fs.DurationVar(&o.agentBackoff, "agent-backoff", 50*time.Millisecond, "first retry backoff of an agent (capped at 4x, full jitter)")
	fs.BoolVar(&o.rolling, "rolling", false, "after the startup, upgrade the group to "+newVersion.String()+" one controller at a time (drain, stop, start again) while every agent keeps calling, and count the calls that failed")
	fs.DurationVar(&o.agentEvery, "agent-every", time.Second, "with -rolling: how often each logged-in agent calls its controller")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Second, "give up (and fail) after this long")
	fs.BoolVar(&o.hold, "hold", false, "after the summary, keep the controllers serving /readyz, /timeline and /metrics until interrupted (SIGINT, SIGTERM)")
	fs.StringVar(&o.log, "log", "", "write every component's slog records to stderr: json or text (default: none)")
	fs.StringVar(&o.trace, "trace", "", "write every controller's startup (its board's timeline) to this file as one Chrome trace: open it in Perfetto or chrome://tracing")
	fs.StringVar(&o.svg, "svg", "", "draw every controller's startup to this file as one SVG, a swimlane per controller on one time axis")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./examples/hacontroller [flags]\n\n"+
			"Runs an HA controller startup in one process on loopback and prints its timeline.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.controllers < 1 || o.controllers > maxControllers:
		return o, fmt.Errorf("-controllers must be between 1 and %d", maxControllers)
	case o.agents < 0 || o.agents > maxAgents:
		return o, fmt.Errorf("-agents must be between 0 and %d (each holds a socket)", maxAgents)
	case o.apiRate <= 0:
		return o, errors.New("-api-rate must be positive")
	case o.apiBurst < 0:
		return o, errors.New("-api-burst must not be negative (0: the smallest burst that reaches the rate)")
	case o.leaseTerm <= 0 || o.fault < 0 || o.steps < 0 || o.checking < 0 || o.serveAfter < 0:
		return o, errors.New("durations must not be negative, and -lease must be positive")
	case o.log != "" && o.log != "json" && o.log != "text":
		return o, fmt.Errorf("-log %q must be json, text or empty (no logs)", o.log)
	case o.agentBackoff <= 0 || o.timeout <= 0 || o.agentEvery <= 0:
		return o, errors.New("-agent-backoff, -agent-every and -timeout must be positive")
	case o.fault != 0 && (o.fault < o.leaseTerm*12/10 || o.fault > o.leaseTerm*17/10):
		// The fault starts just after a renewal. Checks for -lease fail once
		// less than -lease of the term is left (0.9×lease in, after the
		// margin), so a shorter fault barely reaches one; the leader keeps
		// its term only if the store recovers well before 1.9×lease.
		return o, fmt.Errorf("-fault %v must be 0 or between 1.2×-lease and 1.7×-lease (%v..%v): shorter barely reaches a check, longer outlasts the term", o.fault, o.leaseTerm*12/10, o.leaseTerm*17/10)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hacontroller:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o, os.Stdout, newLogger(o.log, os.Stderr))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hacontroller: FAILED:", err)
		os.Exit(1)
	}
}

// newLogger returns the logger every component gets: format "json" or
// "text" to w, or nil (no logs) for "".
func newLogger(format string, w io.Writer) *slog.Logger {
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil))
	case "text":
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return nil
}

// run runs the whole scenario and returns an error naming every story that
// did not happen and every broken invariant; log (nil: none) receives every
// component's records. The controllers live until run returns: with -hold,
// until ctx ends after the summary; ending ctx earlier stops the run.
func run(ctx context.Context, o options, out io.Writer, log *slog.Logger) error {
	tl := newTimeline(out)
	probed := make(chan struct{}) // the first controller's upgrade waits for its probe
	cfgFor := controllerConfigs(o, tl, log)
	ctrls, err := newControllers(o, cfgFor, probed)
	if err != nil {
		return err
	}
	all := slices.Clone(ctrls) // every controller of the run, restarted ones too
	defer func() {
		for _, c := range all {
			c.shutdown()
		}
	}()
	for _, c := range ctrls {
		tl.log(c.name, "readiness %s", readinessURL(c))
	}
	// The controllers run until run returns, starting once the scenario
	// closes begin; the scenario must end within -timeout.
	begin := make(chan struct{})
	runs := startControllers(ctx)
	defer runs.stop()
	for i, c := range ctrls {
		runs.start(c, begin, o.serveAfter*time.Duration(i+1))
	}
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	s := scenario(deadline, o, tl, log, ctrls, begin, probed)
	problems := s.violations()
	var chain bytes.Buffer // the startup's, before a rolling upgrade drains the board
	printCriticalChain(&chain, ctrls[0])
	var rolled *rollReport
	if o.rolling && len(problems) == 0 && deadline.Err() == nil {
		var restarted []*controller
		rolled, restarted = rollingUpgrade(deadline, o, tl, cfgFor, ctrls, func(c *controller) { runs.start(c, nil, 0) })
		all = append(all, restarted...)
		problems = append(problems, rolled.violations(o)...)
	}
	if err := writeStartup(o, tl, ctrls); err != nil {
		problems = append(problems, err.Error())
	}
	if deadline.Err() != nil {
		problems = append(problems, fmt.Sprintf("did not finish within -timeout %v (or was interrupted): %s", o.timeout, pending(ctrls)))
	}
	// Printed under the timeline's lock: a run cut short still has
	// goroutines telling the timeline what they do.
	tl.write(func(w io.Writer) {
		s.print(w)
		_, _ = chain.WriteTo(w)
		if rolled != nil {
			rolled.print(w)
		}
		if len(problems) == 0 {
			fmt.Fprintln(w, "ok: every invariant held, every story happened")
		}
	})
	if o.hold && ctx.Err() == nil {
		hold(ctx, tl, ctrls)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// scenario starts the controllers (closing begin) against the herd of
// agents, faults the leader's lease store, probes the first controller's
// readiness before and after it is stable, and measures what happened. It
// closes probed once the first probe is answered: the first controller's
// upgrade completes only then.
func scenario(ctx context.Context, o options, tl *timeline, log *slog.Logger, ctrls []*controller, begin, probed chan struct{}) *summary {
	// The herd is at the door before the controllers start: every API
	// port has refused an agent, and its agents are retrying.
	agents := startAgents(ctx, o, tl, ctrls)
	agents.refusedEverywhere(ctx)
	tl.log("agents", "refused by every api port (closed until stable), retrying: the controllers start")
	close(begin)
	starting := probeWhileStarting(ctx, tl, ctrls[0], func() { close(probed) })

	for _, c := range ctrls {
		select {
		case <-c.api.Done():
		case <-ctx.Done():
		}
	}
	lead := firstLeader(ctrls)
	fault := leaseFault(ctx, o, tl, lead)
	stats := agents.wait()
	for _, c := range ctrls {
		_ = gate.Wait(ctx, c.workers) // a failure is the upgrade-refusal check's to report
	}
	stable := probeReadyz(ctx, ctrls[0])
	tl.log("probe", "%s stable: %v", ctrls[0].name, stable)

	s := measure(o, ctrls, stats, lead, fault)
	s.starting, s.stable = starting, stable
	return s
}

// newControllers makes o.controllers controllers, each with its API port on
// its own loopback address; the first one's upgrade completes only once
// probed closes. On error it shuts down those it made.
func newControllers(o options, cfgFor func(i int) controllerConfig, probed <-chan struct{}) ([]*controller, error) {
	ctrls := make([]*controller, 0, o.controllers)
	for i := range o.controllers {
		cfg := cfgFor(i)
		if i == 0 {
			cfg.upgradeHold = probed
		}
		c, err := newController(cfg)
		if err != nil {
			for _, c := range ctrls {
				c.shutdown()
			}
			return nil, fmt.Errorf("starting controller c%d: %w", i, err)
		}
		ctrls = append(ctrls, c)
	}
	return ctrls, nil
}

// controllerConfigs returns the config of the i-th controller: on the
// group's one lease store, the controller port on 127.0.0.1 and the API
// port on an address of its own, both on ports the kernel picks, at
// agentVersion. Once the controller has bound them, its successor
// (-rolling) gets the same addresses, so the agents and the peers find it
// where they found its predecessor.
func controllerConfigs(o options, tl *timeline, log *slog.Logger) func(i int) controllerConfig {
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	var (
		mu                  sync.Mutex
		ctrlAddrs, apiAddrs = make([]string, o.controllers), make([]string, o.controllers)
	)
	return func(i int) controllerConfig {
		name := fmt.Sprintf("c%d", i)
		mu.Lock()
		defer mu.Unlock()
		if ctrlAddrs[i] == "" {
			ctrlAddrs[i], apiAddrs[i] = "127.0.0.1:0", net.JoinHostPort(apiHost(i), "0")
		}
		return controllerConfig{
			name: name, ctrlAddr: ctrlAddrs[i], apiAddr: apiAddrs[i], version: agentVersion,
			o: o, tl: tl, store: store, log: withController(log, name),
			peers: func() []string {
				mu.Lock()
				defer mu.Unlock()
				return slices.Concat(ctrlAddrs[:i], ctrlAddrs[i+1:])
			},
			bound: func(ctrl, api string) {
				mu.Lock()
				defer mu.Unlock()
				ctrlAddrs[i], apiAddrs[i] = ctrl, api
			},
		}
	}
}

// withController returns log with the controller's name on every record,
// or nil for no logs.
func withController(log *slog.Logger, name string) *slog.Logger {
	if log == nil {
		return nil
	}
	return log.With("controller", name)
}

// runs are the controllers' startups, each running until its controller
// stops (controller.stopRun) or stop ends them all.
type runs struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startControllers(ctx context.Context) *runs {
	r := &runs{}
	r.ctx, r.cancel = context.WithCancel(ctx)
	return r
}

// start runs c's startup once begin closes (nil: at once), its server
// coming up after serveAfter.
func (r *runs) start(c *controller, begin <-chan struct{}, serveAfter time.Duration) {
	ctx, cancel := context.WithCancel(r.ctx)
	c.stopRun = cancel
	r.wg.Go(func() {
		defer cancel()
		if closed(ctx, begin) {
			c.start(ctx, serveAfter)
		}
	})
}

// stop ends every startup and waits for them.
func (r *runs) stop() {
	r.cancel()
	r.wg.Wait()
}

func pending(ctrls []*controller) string {
	var s []string
	for _, c := range ctrls {
		s = append(s, c.name+": "+c.board.Report().String())
	}
	return strings.Join(s, " | ")
}

// writeStartup writes the controllers' boards as one trace (-trace) and
// one swimlane SVG (-svg), as they stand at the end of the scenario.
func writeStartup(o options, tl *timeline, ctrls []*controller) error {
	if o.trace == "" && o.svg == "" {
		return nil
	}
	timelines := make([]gate.Timeline, len(ctrls))
	for i, c := range ctrls {
		timelines[i] = c.board.Timeline()
	}
	for _, f := range []struct {
		path, what string
		write      func(io.Writer, ...gate.Timeline) error
	}{
		{o.trace, "trace (open it in Perfetto or chrome://tracing)", boardview.WriteTrace},
		{o.svg, "picture (a swimlane per controller)", boardview.WriteSVG},
	} {
		if f.path == "" {
			continue
		}
		var buf bytes.Buffer
		if err := f.write(&buf, timelines...); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing the startup %s: %w", f.what, err)
		}
		tl.log("boards", "startup of %d controllers written to %s: %s", len(ctrls), f.path, f.what)
	}
	return nil
}
