// Command hacontroller is coldstart's main job: an HA controller startup
// you can watch. Three controllers and a few thousand agents run in one
// process on loopback ports the kernel picks (nothing else is ever
// dialled). Each controller binds its controller port, dials itself through
// the dialer (which waits for its own server instead of a peer), runs
// upgrade steps behind the upgrade gate, competes for the singular lease,
// and opens its rate-limited API port only once all of that is done. The
// agents storm the API ports from the start and retry refusals. Midway the
// leader's lease store faults: its checks must say "renewal failed, still
// held", never "not leader".
//
// Every story happens in every run by construction, not by timing: the
// controllers start only once every API port has refused an agent; a
// controller's upgrade steps complete only after the upgrade gate refused
// its own call; the leader's last check during the fault comes when its
// cached promise no longer covers the lease term, so it must answer
// ErrRenewalFailed.
//
// It prints a timeline and a summary and exits non-zero, naming them, if a
// story did not happen or an invariant broke.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
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
	timeout      time.Duration
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
	fs.DurationVar(&o.timeout, "timeout", 20*time.Second, "give up (and fail) after this long")
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
	case o.agentBackoff <= 0 || o.timeout <= 0:
		return o, errors.New("-agent-backoff and -timeout must be positive")
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
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hacontroller: FAILED:", err)
		os.Exit(1)
	}
}

// run runs the whole scenario and returns an error naming every story that
// did not happen and every broken invariant.
func run(o options, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	tl := newTimeline(out)
	ctrls, err := newControllers(o, tl)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range ctrls {
			c.shutdown()
		}
	}()

	// The herd is at the door before the controllers start: every API
	// port has refused an agent, and its agents are retrying.
	agents := startAgents(ctx, o, tl, ctrls)
	agents.refusedEverywhere(ctx)
	tl.log("agents", "refused by every api port (closed until stable), retrying: the controllers start")
	stop := startControllers(ctx, o, ctrls)
	defer stop()

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

	s := measure(o, ctrls, stats, lead, fault)
	s.print(out)
	problems := s.violations()
	if ctx.Err() != nil {
		problems = append(problems, fmt.Sprintf("did not finish within -timeout %v: %s", o.timeout, pending(ctrls)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "ok: every invariant held, every story happened")
	return nil
}

// newControllers makes o.controllers controllers, each with its API port on
// its own loopback address; on error it shuts down those it made.
func newControllers(o options, tl *timeline) ([]*controller, error) {
	store := lease.NewMemStore(nil)
	ctrls := make([]*controller, 0, o.controllers)
	for i := range o.controllers {
		c, err := newController(controllerConfig{
			name:    fmt.Sprintf("c%d", i),
			apiAddr: net.JoinHostPort(apiHost(i), "0"),
			o:       o,
			tl:      tl,
			store:   store,
			peers:   func() []string { return peerAddrs(ctrls, i) },
		})
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

// peerAddrs returns the controller ports of every controller but the i-th.
func peerAddrs(ctrls []*controller, i int) []string {
	var addrs []string
	for j, c := range ctrls {
		if j != i {
			addrs = append(addrs, c.ctrlAddr)
		}
	}
	return addrs
}

// startControllers starts every controller's startup, the i-th one's server
// coming up after (i+1)×serveAfter; stop ends them and waits.
func startControllers(ctx context.Context, o options, ctrls []*controller) (stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, c := range ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.start(runCtx, o.serveAfter*time.Duration(i+1))
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func pending(ctrls []*controller) string {
	var s []string
	for _, c := range ctrls {
		s = append(s, c.name+": "+c.board.Report().String())
	}
	return strings.Join(s, " | ")
}
