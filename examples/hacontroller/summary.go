package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/upgrade"
)

// summary is what a run measured, read once the scenario is over. The
// checks below judge it; print shows it.
type summary struct {
	o      options
	ctrls  []ctrlSummary
	agents struct {
		admitted, refused, upgrading int64
		firstErr                     error
	}
	leader      string // "" when no controller holds the lease
	leaderToken uint64
	leadRuns    int   // the leader's runs of its singular worker
	leadStop    error // why the lease stopped it, if it did
	fault       faultReport
	// starting and stable are the first controller's /readyz?verbose
	// answers before it was stable and after.
	starting, stable readyzAnswer
}

// ctrlSummary is what one controller did.
type ctrlSummary struct {
	name              string
	selfDials, local  int                   // self-dials, and those that stayed on loopback
	callsRefused      int                   // own calls refused during the upgrade
	neverRefused      []string              // own calls the upgrade never refused
	callErr           error                 // why a refused call never went through; nil if all did
	agents            int                   // agents logging in on its API port
	admitted, refused int64                 // of those: admitted, dials refused while the port was closed
	peak              int                   // most API conns in one acceptWindow
	sustained         float64               // API accept rate beyond the first burst, per second
	throttled         time.Duration         // time the API port's limiter held conns back
	earlyAPI          int                   // API conns before the controller was stable
	upgradeAtAPI      upgrade.Phase         // the upgrade's phase when the api port opened
	upgradeCalls      []upgrade.CallsReport // what the upgrade gate decided, by phase
	opened            []string              // gates in the order they opened
	stableAfter       time.Duration         // from start to stable
	leaseErr          error                 // the first definitive lease answer (ErrNotLeader for followers)
	workersAccepted   bool                  // the refused calls went through
}

// acceptWindow is the window the API accept rate is checked over.
const acceptWindow = 250 * time.Millisecond

// measure reads what the run did from the controllers, the agents and the
// lease fault.
func measure(o options, ctrls []*controller, agents *agentStats, leader *controller, fault faultReport) *summary {
	s := &summary{o: o, fault: fault}
	s.agents.upgrading = agents.upgrading.Load()
	if p := agents.firstErr.Load(); p != nil {
		s.agents.firstErr = *p
	}
	for i, c := range ctrls {
		cs := c.measure(o)
		cs.agents = agents.perCtrl[i].agents
		cs.admitted = agents.perCtrl[i].admitted.Load()
		cs.refused = agents.perCtrl[i].refused.Load()
		s.agents.admitted += cs.admitted
		s.agents.refused += cs.refused
		s.ctrls = append(s.ctrls, cs)
	}
	if leader != nil {
		leader.mu.Lock()
		s.leader, s.leaderToken = leader.name, leader.status.Token
		s.leadRuns, s.leadStop = leader.leadRuns, leader.leadStop
		leader.mu.Unlock()
	}
	return s
}

// measure reads what controller c did: its self-dials from its dialer's
// Report, when it became stable from its board's Timeline.
func (c *controller) measure(o options) ctrlSummary {
	cs := ctrlSummary{name: c.name, opened: c.board.Report().Opened()}
	cs.peak, cs.sustained = c.acceptRates(acceptWindow, o.apiBurst)
	if c.ln != nil { // nil only in a controller assembled without ports (the summary tests')
		cs.throttled = c.ln.Report().API.Throttled
	}
	if c.up != nil {
		cs.upgradeCalls = c.up.Report().Calls
	}
	if c.dial != nil {
		r := c.dial.Report()
		cs.selfDials, cs.local = int(r.LocalDials+r.PeerDials), int(r.LocalDials)
	}
	cs.workersAccepted = true
	for _, call := range c.calls {
		cs.callsRefused += int(call.n.Load())
		select {
		case <-call.done:
			if call.err != nil {
				cs.callErr, cs.workersAccepted = fmt.Errorf("%s: %w", call.name, call.err), false
			}
		default:
			cs.callErr, cs.workersAccepted = fmt.Errorf("%s: still refused when the run ended", call.name), false
		}
		if call.n.Load() == 0 {
			cs.neverRefused = append(cs.neverRefused, call.name)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cs.earlyAPI, cs.leaseErr, cs.upgradeAtAPI = c.earlyAPI, c.leaseErr, c.upgradeAtAPI
	tl := c.board.Timeline()
	for _, e := range tl.Entries {
		if e.Name == "stable" && e.State == gate.StateUnlocked && !c.startedAt.IsZero() {
			cs.stableAfter = tl.Start.Add(e.Ended).Sub(c.startedAt)
		}
	}
	return cs
}

// check is one story the run must show or one invariant it must keep:
// verify returns what went wrong, if anything.
type check struct {
	name   string
	verify func(s *summary) []string
}

// checks lists every story the README promises and every invariant.
var checks = []check{
	{"self-dials local", checkSelfDials},
	{"agents admitted", checkAgentsAdmitted},
	{"agents refused while the api port was closed", checkAgentsRefused},
	{"api port opens only once stable", checkAPIOrder},
	{"rate limit", checkRateLimit},
	{"controller calls refused during the upgrade, then accepted", checkUpgradeRefusal},
	{"followers told who leads", checkLeader},
	{"lease fault: renewal failed, never not-leader", checkLeaseFault},
	{"readiness probe: 503 while starting, 200 once stable", checkReadiness},
}

// violations runs every check and returns each problem prefixed by the
// check's name.
func (s *summary) violations() []string {
	var problems []string
	for _, ch := range checks {
		for _, p := range ch.verify(s) {
			problems = append(problems, ch.name+": "+p)
		}
	}
	return problems
}

func checkSelfDials(s *summary) []string {
	var problems []string
	local, total := 0, 0
	for _, c := range s.ctrls {
		local, total = local+c.local, total+c.selfDials
		if c.selfDials == 0 {
			problems = append(problems, fmt.Sprintf("%s never dialled itself", c.name))
		}
	}
	if local != total {
		problems = append(problems, fmt.Sprintf("%d of %d self-dials went to a peer", total-local, total))
	}
	return problems
}

func checkAgentsAdmitted(s *summary) []string {
	var problems []string
	if int(s.agents.admitted) != s.o.agents {
		problems = append(problems, fmt.Sprintf("%d agents not admitted (first error: %v)", int64(s.o.agents)-s.agents.admitted, s.agents.firstErr))
	}
	if n := s.agents.upgrading; n > 0 {
		problems = append(problems, fmt.Sprintf("agents were refused %d times with \"upgrade in progress\": an api port opened before its upgrade completed", n))
	}
	return problems
}

// checkAgentsRefused: the controllers start only once every agent has
// tried its API port (see run), so each port with agents refused some.
func checkAgentsRefused(s *summary) []string {
	var problems []string
	for _, c := range s.ctrls {
		if c.agents > 0 && c.refused == 0 {
			problems = append(problems, fmt.Sprintf("%s: none of its %d agents was refused before its api port opened", c.name, c.agents))
		}
	}
	return problems
}

// checkAPIOrder: the api port opened after every gate stable is made of,
// in the board's order, and while the upgrade gate itself said complete.
func checkAPIOrder(s *summary) []string {
	var problems []string
	for _, c := range s.ctrls {
		if c.earlyAPI > 0 {
			problems = append(problems, fmt.Sprintf("%s: the api port accepted %d agent connections before the controller was stable", c.name, c.earlyAPI))
		}
		api := slices.Index(c.opened, "api-port")
		for _, before := range []string{"serving", "self-dial", "upgrade", "lease", "stable"} {
			if i := slices.Index(c.opened, before); i < 0 || api < 0 || i > api {
				problems = append(problems, fmt.Sprintf("%s: the api port did not open after %q: %v", c.name, before, c.opened))
			}
		}
		if api >= 0 && c.upgradeAtAPI != upgrade.PhaseComplete {
			problems = append(problems, fmt.Sprintf("%s: the api port opened while the upgrade was %v", c.name, c.upgradeAtAPI))
		}
	}
	return problems
}

// rateLimit returns the most API conns the limit lets through in
// acceptWindow, and the tolerance for scheduling delay.
//
// The server stamps a conn after the limiter let it through, late by timer
// oversleep and goroutine hand-offs; a late stamp moves a conn into the next
// window. Allow 20ms of that (a missing limiter overshoots by the whole
// herd, not by a few conns).
func rateLimit(o options) (limit, tolerance float64) {
	const schedSlack = 20 * time.Millisecond
	return o.apiRate*acceptWindow.Seconds() + float64(o.apiBurst), o.apiRate*schedSlack.Seconds() + 1
}

// checkRateLimit: no API port accepts faster than its limit, and each port
// whose herd is bigger than the burst had it held back by the limiter. The
// herd is retrying before the controllers start (see run), each agent at
// most agentCap×agent-backoff apart, up to agentSlots of them connecting at
// once against one accept loop: when a port opens, more than a burst (10 by
// default) of its agents wait in its backlog at once, even when the machine
// is too busy for them to outrun the limit on average.
func checkRateLimit(s *summary) []string {
	var problems []string
	limit, tolerance := rateLimit(s.o)
	for _, c := range s.ctrls {
		if float64(c.peak) > limit+tolerance {
			problems = append(problems, fmt.Sprintf("%s accepted %d API conns in %v, above the limit's %.0f (+%.0f for scheduling)", c.name, c.peak, acceptWindow, limit, tolerance))
		}
		if c.agents > s.o.apiBurst && c.throttled == 0 {
			problems = append(problems, fmt.Sprintf("%s: the limiter never held back its %d agents (burst %d)", c.name, c.agents, s.o.apiBurst))
		}
	}
	return problems
}

// checkUpgradeRefusal: each of a controller's own calls (HTTP, gRPC unary
// and stream) was refused during the upgrade (runUpgrade completes only
// after that) and then went through.
func checkUpgradeRefusal(s *summary) []string {
	var problems []string
	for _, c := range s.ctrls {
		if c.callsRefused == 0 || len(c.neverRefused) > 0 {
			problems = append(problems, fmt.Sprintf("%s: its calls were never refused during the upgrade: %s", c.name, strings.Join(c.neverRefused, ", ")))
		}
		if !c.workersAccepted {
			problems = append(problems, fmt.Sprintf("%s: a call refused during the upgrade never went through: %v", c.name, c.callErr))
		}
	}
	return problems
}

func checkLeader(s *summary) []string {
	if s.leader == "" {
		return []string{"no controller holds the lease"}
	}
	var problems []string
	for _, c := range s.ctrls {
		if c.name == s.leader {
			continue
		}
		if !c.toldLeads(s.leader) {
			problems = append(problems, fmt.Sprintf("%s was not told that %s leads (got %v)", c.name, s.leader, c.leaseErr))
		}
	}
	return problems
}

// toldLeads reports whether c's lease answer named leader as the holder.
func (c ctrlSummary) toldLeads(leader string) bool {
	var nl *lease.NotLeaderError
	return errors.As(c.leaseErr, &nl) && nl.Holder == leader
}

// checkLeaseFault: during the leader's store fault, some check answered
// ErrRenewalFailed (checkDuringFault makes one certain), none answered
// ErrNotLeader, and the leader kept its term.
func checkLeaseFault(s *summary) []string {
	f := s.fault
	problems := slices.Clone(f.problems)
	if s.o.fault == 0 || s.leader == "" || !f.ran {
		return problems
	}
	if f.notLeader > 0 {
		problems = append(problems, fmt.Sprintf("leader %s was told %q %d times during a store fault", s.leader, f.firstNotLeader, f.notLeader))
	}
	if f.failed == 0 {
		problems = append(problems, fmt.Sprintf("no check during the fault of %v answered ErrRenewalFailed", s.o.fault))
	}
	if f.after.State == lease.Held && f.after.Token != f.before.Token {
		problems = append(problems, fmt.Sprintf("leader %s lost its term: token %d became %d", s.leader, f.before.Token, f.after.Token))
	}
	// Lead stops the singular worker when the promise runs out (a process
	// stalled past the lease Margin on a loaded machine does that), never because
	// a renewal failed while the promise stood.
	switch {
	case s.leadRuns == 0:
		problems = append(problems, fmt.Sprintf("leader %s's singular worker never ran under Lead", s.leader))
	case errors.Is(s.leadStop, lease.ErrNotLeader):
		problems = append(problems, fmt.Sprintf("leader %s's singular worker was stopped by: %v", s.leader, s.leadStop))
	}
	return problems
}

// checkReadiness: the probe taken while the controller was starting
// (probeWhileStarting holds its upgrade until then) failed with what it
// waited on; the one taken once it was stable passed.
func checkReadiness(s *summary) []string {
	var problems []string
	if p := s.starting.problem(false); p != "" {
		problems = append(problems, p)
	}
	if p := s.stable.problem(true); p != "" {
		problems = append(problems, p)
	}
	return problems
}

// print writes the summary.
func (s *summary) print(out io.Writer) {
	var per, peaks, toStable, decided []string
	local, total, callsRefused := 0, 0, 0
	for _, c := range s.ctrls {
		local, total, callsRefused = local+c.local, total+c.selfDials, callsRefused+c.callsRefused
		per = append(per, fmt.Sprintf("%s %d", c.name, c.admitted))
		peaks = append(peaks, fmt.Sprintf("%s %.0f/s (peak %d in %v, held back %v)", c.name, c.sustained, c.peak, acceptWindow, c.throttled.Round(time.Millisecond)))
		toStable = append(toStable, fmt.Sprintf("%s %v", c.name, c.stableAfter.Round(time.Millisecond)))
		var phases []string
		for _, p := range c.upgradeCalls {
			if p.Refused+p.Admitted > 0 {
				phases = append(phases, fmt.Sprintf("%d refused + %d admitted in %s", p.Refused, p.Admitted, p.Phase))
			}
		}
		decided = append(decided, fmt.Sprintf("%s %s", c.name, strings.Join(phases, " and ")))
	}
	limit, _ := rateLimit(s.o)
	fmt.Fprintln(out, "\nsummary")
	fmt.Fprintf(out, "  controller self-dials     %d/%d local (%d to peers)\n", local, total, total-local)
	fmt.Fprintf(out, "  agents admitted           %d/%d (%s)\n", s.agents.admitted, s.o.agents, strings.Join(per, ", "))
	fmt.Fprintf(out, "  refusals retried          %d agent dials refused while an api port was closed; %d controller calls (HTTP, gRPC unary and stream) refused during the upgrade (not executed), waited out until accepted\n",
		s.agents.refused, callsRefused)
	fmt.Fprintf(out, "  upgrade gate calls        %s (HTTP and gRPC; admitted: allowlisted)\n", strings.Join(decided, ", "))
	fmt.Fprintf(out, "  api accept rate           %s; limit %.0f/s, so at most %.0f in %v with burst %d\n",
		strings.Join(peaks, ", "), s.o.apiRate, limit, acceptWindow, s.o.apiBurst)
	if s.leader != "" {
		var told []string
		for _, c := range s.ctrls {
			if c.name != s.leader && c.toldLeads(s.leader) {
				told = append(told, c.name)
			}
		}
		if len(s.ctrls) == 1 {
			told = []string{"(no other controller)"}
		}
		fmt.Fprintf(out, "  leader                    %s (token %d); told \"held by %s\": %s\n", s.leader, s.leaderToken, s.leader, strings.Join(told, ", "))
		stopped := "never stopped by the lease"
		if s.leadStop != nil {
			stopped = fmt.Sprintf("last stopped when the promise ran out: %v", s.leadStop)
		}
		runs := fmt.Sprintf("%d runs", s.leadRuns)
		if s.leadRuns == 1 {
			runs = "1 run"
		}
		fmt.Fprintf(out, "  singular worker           %s under Lead (%s): %s\n", s.leader, runs, stopped)
	}
	fmt.Fprintf(out, "  time to stable            %s\n", strings.Join(toStable, ", "))
}

// printCriticalChain writes c's critical chain: the gate that ended last,
// the input that opened last before it, and so on back.
func printCriticalChain(out io.Writer, c *controller) {
	chain := c.board.Timeline().CriticalChain("")
	fmt.Fprintf(out, "\ncritical chain of %s (@ when each gate opened, + how long it took after its input)\n", c.name)
	for _, line := range strings.Split(strings.TrimSuffix(chain.String(), "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}
}
