package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

// The rolling upgrade (-rolling) runs once the startup is over: with every
// agent logged in and calling, each controller in turn drains, stops and
// starts again on newVersion; the group's upgrade steps for newVersion run
// once, on whichever restarted controller holds the upgrade lease, and the
// others open when they see the steps recorded.

// newVersion is the version the rolling upgrade moves the group to.
var newVersion = binaries.Version{Major: 4, Minor: 3, Patch: 0}

// callBudget is how long an agent call may take, refusals waited out and
// other controllers tried, before it is a failure returned to its caller.
const callBudget = 10 * time.Second

// rollReport is what the rolling upgrade measured.
type rollReport struct {
	calls, failed, elsewhere atomic.Int64 // agent calls; of those, failed, and answered by another controller than the agent's
	waited                   atomic.Int64 // refusals waited out, not failures
	toPeer                   atomic.Int64 // refusals of a draining controller that named a ready peer
	firstErr                 atomic.Pointer[error]

	mu         sync.Mutex
	restarts   []restartReport
	restartErr error // why a restart did not complete
	steps      *stepRecord
}

// restartReport is one controller's drain, stop and start on newVersion.
type restartReport struct {
	name                  string
	drain, down, toStable time.Duration // drain: from its start to the listener closed; down: until the API port opened again; toStable: start to stable
	ledBefore             bool          // it held the singular lease when its drain began
	gap                   time.Duration // leaderless gap of its hand-over, if it led
	newLeader             string
	selfDials, local      int // the restarted controller's self-dials, and those that stayed local
}

// fleet is the logged-in agents calling the controllers' API ports
// throughout the rolling upgrade, each at its own controller first and at
// the others when that one is away.
type fleet struct {
	addrs  []string // every controller's API port: they keep their addresses across restarts
	client *http.Client
	every  time.Duration
	r      *rollReport
	wg     sync.WaitGroup
}

// startFleet starts n agents, agent i calling every `every` from a
// staggered start, until ctx ends.
func startFleet(ctx context.Context, n int, every time.Duration, addrs []string, r *rollReport) *fleet {
	f := &fleet{addrs: addrs, every: every, r: r}
	// Each agent keeps its connection (it is logged in): a drained
	// controller closes it, and the agent dials again, there or elsewhere.
	f.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: n,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
	}}
	for i := range n {
		f.wg.Go(func() { f.agent(ctx, i, every*time.Duration(i)/time.Duration(max(n, 1))) })
	}
	return f
}

// stop waits for the agents to end (their ctx ended) and closes their
// connections.
func (f *fleet) stop() {
	f.wg.Wait()
	f.client.CloseIdleConnections()
}

func (f *fleet) agent(ctx context.Context, i int, offset time.Duration) {
	home := i % len(f.addrs)
	t := time.NewTimer(offset)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		var err error
		home, err = f.call(ctx, i, home)
		if ctx.Err() != nil {
			return
		}
		f.r.calls.Add(1)
		if err != nil {
			f.r.failed.Add(1)
			f.r.firstErr.CompareAndSwap(nil, &err)
		}
		t.Reset(f.every)
	}
}

// call makes agent i's call, at its home controller first. A refusal is
// waited out as the server asks, but one that names a ready peer (the
// controller drains) sends the agent to the next controller at once, as
// does a controller that is away (its port closed as it restarts); it
// returns the controller that answered, the agent's home from then on.
func (f *fleet) call(ctx context.Context, i, home int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callBudget)
	defer cancel()
	at := home
	for tries := 1; ; tries++ {
		url := fmt.Sprintf("http://%s/agent/ping?agent=%d", f.addrs[at], i)
		err := httpCall(ctx, f.client, "GET", url, "")
		var ip *upgrade.InProgressError
		var wait time.Duration
		switch {
		case err == nil:
			if at != home {
				f.r.elsewhere.Add(1)
			}
			return at, nil
		case ctx.Err() != nil:
			return at, err
		case away(err):
			if peerNamed(err) {
				f.r.toPeer.Add(1)
			}
			at = (at + 1) % len(f.addrs)
			if tries%len(f.addrs) == 0 { // every controller away: a pause before the next round
				wait = 20 * time.Millisecond
			}
		case errors.As(err, &ip):
			f.r.waited.Add(1)
			wait = ip.RetryAfter()
		default:
			return at, err
		}
		if !sleep(ctx, wait) {
			return at, ctx.Err()
		}
	}
}

// away says whether err means the controller is not there to answer: it
// drains and names a ready peer, its port is closed, or it closed the
// connection as it stopped (net/http says "server closed idle
// connection", with no exported error, when the close raced the request
// it had not read).
func away(err error) bool {
	return peerNamed(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// peerNamed says whether err is a draining controller's refusal that
// names a ready peer.
func peerNamed(err error) bool {
	var ip *upgrade.InProgressError
	return errors.As(err, &ip) && ip.PeerReady
}

// stepRecord records each run of a group upgrade step: which token ran
// it, when, and whether two ever ran at once.
type stepRecord struct {
	mu      sync.Mutex
	running map[uint64]string // token -> the step it runs now
	runs    map[string][]uint64
	overlap []string
}

func newStepRecord() *stepRecord {
	return &stepRecord{running: map[uint64]string{}, runs: map[string][]uint64{}}
}

// begin records that token starts step; end, returned, that it finished.
func (s *stepRecord) begin(step string, token uint64) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, st := range s.running {
		s.overlap = append(s.overlap, fmt.Sprintf("%s (token %d) began while %s (token %d) ran", step, token, st, other))
	}
	s.running[token] = step
	s.runs[step] = append(s.runs[step], token)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.running, token)
	}
}

// twice returns the steps run more than once, with their tokens.
func (s *stepRecord) twice() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for step, tokens := range s.runs {
		if len(tokens) > 1 {
			out = append(out, fmt.Sprintf("%s by tokens %v", step, tokens))
		}
	}
	slices.Sort(out)
	return out
}

func (r *rollReport) violations(o options) []string {
	var problems []string
	if n := r.failed.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d agent calls failed, the first with: %v", n, *r.firstErr.Load()))
	}
	if r.calls.Load() == 0 {
		problems = append(problems, "no agent call was made during the rolling upgrade")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.restarts) != o.controllers {
		problems = append(problems, fmt.Sprintf("%d of %d controllers restarted on %s", len(r.restarts), o.controllers, newVersion))
	}
	if r.restartErr != nil {
		problems = append(problems, r.restartErr.Error())
	}
	for _, rs := range r.restarts {
		if rs.local != rs.selfDials {
			problems = append(problems, fmt.Sprintf("%s dialled a peer %d times after its restart", rs.name, rs.selfDials-rs.local))
		}
		if rs.ledBefore && rs.newLeader == "" {
			problems = append(problems, fmt.Sprintf("nobody took the lease over from %s", rs.name))
		}
	}
	for _, p := range r.steps.twice() {
		problems = append(problems, "upgrade step run twice: "+p)
	}
	problems = append(problems, r.steps.overlap...)
	return problems
}

func (r *rollReport) print(out io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(out, "\nrolling upgrade to %s\n", newVersion)
	fmt.Fprintf(out, "  agent calls               %d, %d failed; %d refusals waited out, %d drain refusals naming a ready peer, %d calls answered by another controller while the agent's was away\n",
		r.calls.Load(), r.failed.Load(), r.waited.Load(), r.toPeer.Load(), r.elsewhere.Load())
	for _, rs := range r.restarts {
		led := ""
		if rs.ledBefore {
			led = fmt.Sprintf("; led: handed over to %s, leaderless %v", rs.newLeader, rs.gap.Round(10*time.Microsecond))
		}
		fmt.Fprintf(out, "  %-25s drained in %v, api port away %v, stable %v after its start; self-dials %d/%d local%s\n",
			rs.name, rs.drain.Round(time.Millisecond), rs.down.Round(time.Millisecond), rs.toStable.Round(time.Millisecond), rs.local, rs.selfDials, led)
	}
	var runs []string
	for step, tokens := range r.steps.runs {
		runs = append(runs, fmt.Sprintf("%s ×%d (token %v)", step, len(tokens), tokens))
	}
	slices.Sort(runs)
	fmt.Fprintf(out, "  group upgrade steps       %s; %d run at once\n", strings.Join(runs, ", "), len(r.steps.overlap))
}

// rollingUpgrade drains, stops and restarts each of ctrls in turn on
// newVersion, at its own addresses, while a fleet of o.agents calls the
// API ports; start runs a restarted controller's startup. It returns what
// it measured and the restarted controllers (for the caller to shut down).
func rollingUpgrade(ctx context.Context, o options, tl *timeline, cfgFor func(i int) controllerConfig, ctrls []*controller, start func(*controller)) (*rollReport, []*controller) {
	r := &rollReport{steps: newStepRecord()}
	cur := slices.Clone(ctrls)
	addrs := make([]string, len(cur))
	for i, c := range cur {
		addrs[i] = c.apiAddress()
	}
	fctx, stopFleet := context.WithCancel(ctx)
	f := startFleet(fctx, o.agents, o.agentEvery, addrs, r)
	defer func() {
		stopFleet()
		f.stop()
	}()
	tl.log("agents", "%d agents logged in, each calling every %v: the rolling upgrade to %s starts", o.agents, o.agentEvery, newVersion)
	var restarted []*controller
	for i := range cur {
		if !sleep(ctx, o.agentEvery) { // every agent calls between two restarts
			break
		}
		rs, nc, err := restart(ctx, o, tl, cur, i, cfgFor(i), r.steps, start)
		if nc != nil {
			restarted = append(restarted, nc)
			cur[i] = nc
		}
		r.mu.Lock()
		if err != nil {
			r.restartErr = fmt.Errorf("restarting %s: %w", cur[i].name, err)
		} else {
			r.restarts = append(r.restarts, rs)
		}
		r.mu.Unlock()
		if err != nil {
			break
		}
	}
	sleep(ctx, o.agentEvery) // and once more on the new version
	return r, restarted
}

// restart drains the i-th controller, starts its successor on newVersion
// and waits for its API port to open again.
func restart(ctx context.Context, o options, tl *timeline, cur []*controller, i int, cfg controllerConfig, steps *stepRecord, start func(*controller)) (restartReport, *controller, error) {
	old := cur[i]
	rs := restartReport{name: old.name}
	began := time.Now()
	tl.log(old.name, "drain: %s stops for the upgrade to %s", old.name, newVersion)
	stopped := old.drain(ctx)
	rs.drain = time.Since(began)
	if rs.ledBefore = !stopped.IsZero(); rs.ledBefore {
		rs.newLeader, rs.gap = nextLeader(ctx, cur, i, stopped)
		tl.log(old.name, "lease handed over to %s, leaderless for %v", rs.newLeader, rs.gap.Round(10*time.Microsecond))
	}
	cfg.version, cfg.steps = newVersion, steps
	nc, err := newController(cfg)
	if err != nil {
		return rs, nil, err
	}
	tl.log(nc.name, "restarted on %s at %s and %s", newVersion, nc.ctrlAddr, cfg.apiAddr)
	started := time.Now()
	start(nc)
	select {
	case <-nc.api.Done():
	case <-ctx.Done():
		return rs, nc, ctx.Err()
	}
	if err := nc.api.Err(); err != nil {
		return rs, nc, err
	}
	rs.down, rs.toStable = time.Since(began), time.Since(started)
	r := nc.dial.Report()
	rs.selfDials, rs.local = int(r.LocalDials+r.PeerDials), int(r.LocalDials)
	return rs, nc, nil
}

// nextLeader waits for another controller than cur[i] to hold the lease
// (which it may have done before the old leader's StepDown returned), and
// returns it with the gap from stopped, when the old leader stopped
// leading, to its Held.
func nextLeader(ctx context.Context, cur []*controller, i int, stopped time.Time) (string, time.Duration) {
	for {
		for j, c := range cur {
			if r := c.tracker.Report(); j != i && r.State == lease.Held && !r.Since.Before(stopped) {
				return c.name, r.Since.Sub(stopped)
			}
		}
		if !sleep(ctx, time.Millisecond) {
			return "", 0
		}
	}
}

// drainGrace is how long a draining controller keeps serving once its
// readiness went false, before its upgrade gate refuses new calls; it
// then refuses them as long again (its lease handed over meanwhile)
// before it shuts its server down.
const drainGrace = 50 * time.Millisecond

// drain stops the controller for its upgrade, as the mirror of its
// startup on the same board: readiness false at once ("draining"); calls
// served for drainGrace ("grace over"); then new calls refused with the
// upgrade wire, naming a ready peer, for drainGrace more, while the calls
// in flight finish; the singular lease handed over if it leads ("lease
// handed over"); the server shut down, its listener closing last ("calls
// finished"). It returns when the listener has closed: the time it
// stopped leading (its tracker's NotHeld, published before the release),
// zero if it did not lead.
func (c *controller) drain(ctx context.Context) (stopped time.Time) {
	leads := c.tracker.Report().State == lease.Held
	grace := gate.New("grace over")
	handedOver := gate.New("lease handed over").After(grace)
	finished := gate.New("calls finished").After(handedOver)
	close(c.drainCh)
	for _, l := range []*gate.Lock{grace, handedOver, finished} {
		c.board.Add(l.Name(), l)
	}
	if closed(ctx, c.refusing) {
		grace.Unlock()
	} else {
		grace.Fail(ctx.Err())
	}
	lameDuck := time.After(drainGrace)
	if leads {
		if err := c.tracker.StepDown(ctx); err == nil {
			stopped = c.tracker.Report().Since
		}
	}
	handedOver.Unlock()
	select {
	case <-lameDuck:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(sctx); err != nil {
		finished.Fail(err)
	} else {
		finished.Unlock()
	}
	c.tl.log(c.name, "drained: %s", c.board.Report())
	c.shutdown()
	c.stopRun()
	return stopped
}

// peerReady says whether one of the peers' boards reads ready: asked by a
// draining controller's upgrade gate, whose refusals then tell agents to
// go there.
func peerReady(peers []string) bool {
	client := &http.Client{Timeout: 200 * time.Millisecond}
	for _, p := range peers {
		resp, err := client.Get("http://" + p + "/readyz")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
	}
	return false
}

// upgradeLease is the lease whose holder runs the group's steps to
// newVersion: only controllers on it compete for it.
var upgradeLease = "upgrade-to-" + newVersion.String()

// runGroupUpgrade runs the group's upgrade to c.version as one upgrade for
// the HA group: every controller on it holds its upgrade gate until the
// lease store, a StepLog, shows each step recorded complete; the holder of
// upgradeLease runs the steps not yet recorded, under its fencing token.
func (c *controller) runGroupUpgrade(ctx context.Context) {
	steps := make([]upgrade.Step, len(groupSteps))
	for i, name := range groupSteps {
		steps[i] = upgrade.Step{Name: name, Run: func(ctx context.Context, token uint64) error {
			end := c.steps.begin(name, token)
			defer end()
			if !c.pause(ctx, c.o.steps/time.Duration(len(groupSteps))) {
				return ctx.Err()
			}
			return nil
		}}
	}
	runner, err := lease.NewTracker(lease.Config{Store: c.store, Name: upgradeLease, Holder: c.name, Duration: c.o.leaseTerm, Logger: c.log})
	if err == nil {
		defer runner.Close()
		var grp *upgrade.Group
		log, ok := c.store.(upgrade.StepLog)
		if !ok {
			c.up.Fail(fmt.Errorf("lease store %T cannot record upgrade steps (not an upgrade.StepLog)", c.store))
			return
		}
		if grp, err = c.up.Group(upgrade.GroupConfig{Log: log, Lease: upgradeLease, Steps: steps, Poll: 20 * time.Millisecond,
			Leader: func() string { return runner.Report().Holder }}); err == nil {
			go func() {
				_ = runner.Lead(ctx, func(ctx context.Context, st lease.Status) error { return grp.Lead(ctx, st.Token) })
			}()
			err = grp.Wait(ctx)
		}
	}
	if err != nil && ctx.Err() == nil {
		c.up.Fail(err)
		return
	}
	c.tl.log(c.name, "group upgrade to %s complete: %d steps recorded", c.version, len(groupSteps))
}

// groupSteps are the group's upgrade steps to newVersion: idempotent, run
// once for the group.
var groupSteps = []string{"4.3.0/schema-1", "4.3.0/schema-2", "4.3.0/reindex"}

// sleep waits d on the wall clock; it reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	return backoff.Sleep(ctx, clock.WallClock, d) == nil
}
