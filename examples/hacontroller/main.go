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
// It prints a timeline and a summary and exits non-zero if any invariant
// breaks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
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
	fs.IntVar(&o.apiBurst, "api-burst", 50, "accept burst of each API port (0: the smallest that reaches -api-rate)")
	fs.DurationVar(&o.serveAfter, "serve-after", 150*time.Millisecond, "time the first controller's server takes to come up (each next one takes this much longer)")
	fs.DurationVar(&o.checking, "checking", 100*time.Millisecond, "time spent checking for an agent binary upgrade")
	fs.DurationVar(&o.steps, "steps", 400*time.Millisecond, "time the upgrade steps run (calls off the allowlist are refused meanwhile)")
	fs.DurationVar(&o.leaseTerm, "lease", 500*time.Millisecond, "leadership guarantee of a lease check (leases are claimed for twice this)")
	fs.DurationVar(&o.fault, "fault", 800*time.Millisecond, "how long the leader's lease store times out midway, starting just after a renewal and cut short so the term it holds outlives it (0: no fault; else between 1.2× and 1.7× -lease)")
	fs.DurationVar(&o.agentBackoff, "agent-backoff", 50*time.Millisecond, "first retry backoff of an agent (capped at 20x, full jitter)")
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

// run runs the whole scenario and returns an error naming every broken
// invariant.
func run(o options, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	tl := newTimeline(out)
	store := lease.NewMemStore(nil)

	ctrls := make([]*controller, o.controllers)
	peersOf := func(i int) func() []string {
		return func() []string {
			var addrs []string
			for j, c := range ctrls {
				if j != i {
					addrs = append(addrs, c.ctrlAddr)
				}
			}
			return addrs
		}
	}
	for i := range ctrls {
		c, err := newController(fmt.Sprintf("c%d", i), apiHost(i), o, tl, store, peersOf(i))
		if err != nil {
			return fmt.Errorf("starting controller c%d: %w", i, err)
		}
		defer c.shutdown()
		ctrls[i] = c
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	for i, c := range ctrls {
		go func() {
			defer func() { done <- struct{}{} }()
			c.start(runCtx, o.serveAfter*time.Duration(i+1))
		}()
	}
	defer func() {
		stop()
		for range ctrls {
			<-done
		}
	}()

	agentsDone := make(chan *agentStats, 1)
	go func() { agentsDone <- runAgents(ctx, o, tl, ctrls) }()

	var problems []string
	for _, c := range ctrls {
		select {
		case <-c.api.Done():
		case <-ctx.Done():
		}
	}
	leader, fault := leaseFault(ctx, o, tl, ctrls)
	problems = append(problems, fault...)
	agents := <-agentsDone
	for _, c := range ctrls {
		if err := gate.Wait(ctx, c.workers); err != nil {
			problems = append(problems, fmt.Sprintf("%s: the call refused during the upgrade never went through: %v", c.name, err))
		}
	}

	if ctx.Err() != nil {
		problems = append(problems, fmt.Sprintf("did not finish within -timeout %v: %s", o.timeout, pending(ctrls)))
	}
	problems = append(problems, summarize(out, o, ctrls, agents, leader)...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "ok: every invariant held")
	return nil
}

func pending(ctrls []*controller) string {
	var s []string
	for _, c := range ctrls {
		s = append(s, c.name+": "+c.board.Report().String())
	}
	return strings.Join(s, " | ")
}

// leaseFault makes the leader's lease store time out for o.fault while the
// leader keeps checking "am I leader for at least the lease term?". Every
// answer must be Held or ErrRenewalFailed — never ErrNotLeader — and once
// the store recovers the leader must hold the same term (same token).
func leaseFault(ctx context.Context, o options, tl *timeline, ctrls []*controller) (*controller, []string) {
	var leader *controller
	for _, c := range ctrls {
		c.mu.Lock()
		held := c.status.State == lease.Held
		c.mu.Unlock()
		if held {
			leader = c
		}
	}
	if leader == nil {
		return nil, []string{"no controller holds the lease"}
	}
	if o.fault == 0 {
		return leader, nil
	}
	// Start the fault just after a renewal, so that the store holds the
	// term for 2×lease from now and a fault shorter than that (parseFlags
	// keeps it under 1.7×lease) can be outlived. Started at a random phase
	// of the renewal cycle, an 800ms fault outlived a 500ms-old renewal
	// and the leader lost its term: a broken scenario, not a broken tracker.
	if err := awaitRenewal(ctx, leader.tracker); err != nil {
		return leader, []string{fmt.Sprintf("leader %s: waiting for a renewal before the fault: %v", leader.name, err)}
	}
	before, err := leader.tracker.Check(ctx, o.leaseTerm)
	if err != nil {
		return leader, []string{fmt.Sprintf("leader %s: check before the fault: %v", leader.name, err)}
	}
	// The store holds the term until about before.Until + margin (2×lease
	// after the renewal was sent). End the fault by before.Until − 0.4×lease
	// at the latest, whenever the renewal was seen, so the first extend
	// after it still finds the term: a loaded machine can deliver the
	// renewal's status late.
	end := time.Now().Add(o.fault)
	if latest := before.Until.Add(-o.leaseTerm * 4 / 10); latest.Before(end) {
		end = latest
	}
	leader.faults.Always(leasetest.OpExtend, leasetest.Timeout)
	tl.log(leader.name, "FAULT: lease store times out every extend for %v", time.Until(end).Round(time.Millisecond))

	var problems []string
	failed, held, notLeader := 0, 0, 0
	for time.Now().Before(end) && ctx.Err() == nil {
		st, err := leader.tracker.Check(ctx, o.leaseTerm)
		switch {
		case errors.Is(err, lease.ErrNotLeader):
			if notLeader++; notLeader == 1 {
				problems = append(problems, fmt.Sprintf("leader %s was told %q during a store fault", leader.name, err))
			}
		case errors.Is(err, lease.ErrRenewalFailed):
			if failed++; failed == 1 {
				var rf *lease.RenewalFailedError
				errors.As(err, &rf)
				tl.log(leader.name, "check during the fault: ErrRenewalFailed (%v), state %s until +%v, token %d: not \"not leader\"",
					rf.Err, st.State, time.Until(st.Until).Round(time.Millisecond), st.Token)
			}
		case err == nil:
			held++
		default:
			problems = append(problems, fmt.Sprintf("leader %s: check during the fault: %v", leader.name, err))
		}
		select {
		case <-time.After(min(o.leaseTerm/10, time.Until(end))):
		case <-ctx.Done():
		}
	}
	leader.faults.Always(leasetest.OpExtend, leasetest.Pass)
	after, err := leader.tracker.Check(ctx, o.leaseTerm)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("leader %s after the fault: %v", leader.name, err))
	case after.Token != before.Token:
		problems = append(problems, fmt.Sprintf("leader %s lost its term: token %d became %d", leader.name, before.Token, after.Token))
	default:
		tl.log(leader.name, "store recovered: lease held, same term (token %d); checks during the fault: %d held from cache, %d renewal-failed, 0 not-leader",
			after.Token, held, failed)
	}
	if notLeader > 1 {
		problems = append(problems, fmt.Sprintf("leader %s was told \"not leader\" %d times during the fault", leader.name, notLeader))
	}
	if failed == 0 && notLeader == 0 && ctx.Err() == nil {
		problems = append(problems, fmt.Sprintf("the fault of %v never reached a check (make -fault longer)", o.fault))
	}
	return leader, problems
}

// awaitRenewal returns once tr has published a Held status after the call
// began: a renewal that has just been confirmed.
func awaitRenewal(ctx context.Context, tr *lease.Tracker) error {
	select { // drop a status published before now (Changes keeps the latest)
	case <-tr.Changes():
	default:
	}
	for {
		select {
		case st, ok := <-tr.Changes():
			if !ok {
				return errors.New("tracker closed")
			}
			if st.State == lease.Held {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// summarize prints the summary and returns the broken invariants.
func summarize(out io.Writer, o options, ctrls []*controller, agents *agentStats, leader *controller) []string {
	var problems []string
	fmt.Fprintln(out, "\nsummary")

	local, total := 0, 0
	var toStable []string
	for _, c := range ctrls {
		c.mu.Lock()
		for _, r := range c.routes {
			total++
			if r.Local {
				local++
			}
		}
		toStable = append(toStable, fmt.Sprintf("%s %v", c.name, c.stableAfter.Round(time.Millisecond)))
		c.mu.Unlock()
	}
	fmt.Fprintf(out, "  controller self-dials     %d/%d local (%d to peers)\n", local, total, total-local)
	if local != total || total < len(ctrls) {
		problems = append(problems, fmt.Sprintf("%d of %d self-dials went to a peer or none happened", total-local, total))
	}

	var per []string
	for i := range ctrls {
		per = append(per, fmt.Sprintf("%s %d", ctrls[i].name, agents.perCtrl[i].Load()))
	}
	fmt.Fprintf(out, "  agents admitted           %d/%d (%s)\n", agents.admitted.Load(), o.agents, strings.Join(per, ", "))
	if int(agents.admitted.Load()) != o.agents {
		problems = append(problems, fmt.Sprintf("%d agents not admitted (first error: %v)", int64(o.agents)-agents.admitted.Load(), agents.firstErr.Load()))
	}
	selfRefused := 0
	for _, c := range ctrls {
		c.mu.Lock()
		selfRefused += c.selfRefused
		c.mu.Unlock()
	}
	fmt.Fprintf(out, "  refusals retried          %d agent dials refused while an api port was closed; %d controller calls refused during the upgrade (not executed), retried until accepted\n",
		agents.refused.Load(), selfRefused)
	if n := agents.upgrading.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("agents were refused %d times with \"upgrade in progress\": an api port opened before its upgrade completed", n))
	}

	const window = 250 * time.Millisecond
	limit := o.apiRate*window.Seconds() + float64(o.apiBurst)
	// The server stamps a conn after the limiter let it through, late by
	// timer oversleep and goroutine hand-offs; a late stamp moves a conn
	// into the next window. Allow that much scheduling delay (a missing
	// limiter overshoots by the whole herd, not by a few conns).
	const schedSlack = 20 * time.Millisecond
	tolerance := o.apiRate*schedSlack.Seconds() + 1
	var peaks []string
	for _, c := range ctrls {
		n, sustained := c.acceptRates(window, o.apiBurst)
		peaks = append(peaks, fmt.Sprintf("%s %.0f/s (peak %d in %v)", c.name, sustained, n, window))
		if float64(n) > limit+tolerance {
			problems = append(problems, fmt.Sprintf("%s accepted %d API conns in %v, above the limit's %.0f (+%.0f for scheduling)", c.name, n, window, limit, tolerance))
		}
	}
	fmt.Fprintf(out, "  api accept rate           %s; limit %.0f/s, so at most %.0f in %v with burst %d\n",
		strings.Join(peaks, ", "), o.apiRate, limit, window, o.apiBurst)

	if leader != nil {
		leader.mu.Lock()
		token := leader.status.Token
		leader.mu.Unlock()
		var told []string
		for _, c := range ctrls {
			if c == leader {
				continue
			}
			c.mu.Lock()
			err := c.leaseErr
			c.mu.Unlock()
			var nl *lease.NotLeaderError
			if errors.As(err, &nl) && nl.Holder == leader.name {
				told = append(told, c.name)
			} else {
				problems = append(problems, fmt.Sprintf("%s was not told that %s leads (got %v)", c.name, leader.name, err))
			}
		}
		if len(ctrls) == 1 {
			told = []string{"(no other controller)"}
		}
		fmt.Fprintf(out, "  leader                    %s (token %d); told \"held by %s\": %s\n", leader.name, token, leader.name, strings.Join(told, ", "))
	}
	fmt.Fprintf(out, "  time to stable            %s\n", strings.Join(toStable, ", "))
	for _, c := range ctrls {
		c.mu.Lock()
		early := c.earlyAPI
		c.mu.Unlock()
		if early > 0 {
			problems = append(problems, fmt.Sprintf("%s: the api port accepted %d agent connections before the controller was stable", c.name, early))
		}
		order := c.board.Report().Opened()
		api := slices.Index(order, "api-port")
		for _, before := range []string{"serving", "self-dial", "upgrade", "lease", "stable"} {
			if i := slices.Index(order, before); i < 0 || api < 0 || i > api {
				problems = append(problems, fmt.Sprintf("%s: the api port did not open after %q: %v", c.name, before, order))
			}
		}
	}
	return problems
}
