package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/upgrade"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunHoldsEveryInvariant runs the main job at a small scale: every
// self-dial local, every agent admitted, the leader keeps its term through
// the store fault, and each API port opens only once its controller is
// stable; and every story shows in the timeline.
func TestRunHoldsEveryInvariant(t *testing.T) {
	// 100 agents per API port at 200/s with burst 10: the accept-rate
	// check has something to bite on (a missing limiter admits them all in
	// one 250ms window, above its 60).
	//
	// A 1s lease, not the default 500ms: under -race on a loaded machine a
	// renewal was once held up long enough (its 125ms call timeout hit
	// again and again) that c0's term ran out before the fault began and c1
	// took over — the lease doing its job, but not the story under test.
	dir := t.TempDir()
	tracePath, svgPath := filepath.Join(dir, "startup.json"), filepath.Join(dir, "startup.svg")
	o, err := parseFlags([]string{"-agents", "300", "-api-rate", "200", "-api-burst", "10", "-steps", "200ms", "-lease", "1s", "-fault", "1.4s",
		"-trace", tracePath, "-svg", svgPath}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	logs := newWaitWriter() // a timer's count record may come late, from another goroutine
	require.NoError(t, run(context.Background(), o, &out, newLogger("json", logs)), out.String())
	s := out.String()
	assertLogRecords(t, logs.String())
	assertStartupFiles(t, tracePath, svgPath)
	assert.Contains(t, s, "boards  startup of 3 controllers written to "+tracePath)
	m := regexp.MustCompile(`controller self-dials     (\d+)/(\d+) local \(0 to peers\)`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	assert.Equal(t, m[1], m[2], "every self-dial local")
	assert.Contains(t, s, "agents admitted           300/300")
	assert.Contains(t, s, "0 not-leader")
	assert.Contains(t, s, "ok: every invariant held")
	for _, c := range []string{"c0", "c1", "c2"} {
		assert.Regexp(t, c+`      self-dial: the dialer moved home`, s)
		assert.Contains(t, s, c+"      POST /controller/workers refused (upgrade in progress")
		assert.Contains(t, s, c+"      grpc Health/List refused (upgrade in progress")
		assert.Contains(t, s, c+"      grpc Health/Watch refused (upgrade in progress")
		assert.Contains(t, s, c+"      POST /controller/workers, grpc Health/List and Health/Watch accepted once the upgrade completed")
		assert.Regexp(t, c+`      stable after \S+: api port open at 127\.0\.0\.\d+:\d+ \(OpenAPIWhen\)`, s)
	}
	// Any controller may lead: the first to claim wins, and on a loaded
	// machine that is not always c0.
	assert.Contains(t, s, "check during the fault: ErrRenewalFailed")
	assert.Regexp(t, `c\d      singular worker started under Lead \(token`, s)
	assert.Regexp(t, `singular worker           c\d under Lead \([1-9]\d* runs?\)`, s)
	assert.Regexp(t, `c0      readiness http://127\.0\.0\.1:\d+/readyz`, s)
	// The probe's place is fixed (c0's upgrade completes only after it), not
	// how long c0 had waited by then: "335ms" or, on a loaded machine, "1.2s".
	assert.Regexp(t, `probe   c0 still starting: GET http://127\.0\.0\.1:\d+/readyz\?verbose -> 503 Service Unavailable\n(?s:.*)\[-\]upgrade locked for \d[\d.]*m?s \(running upgrade steps\)\n(?s:.*)readyz check failed`, s)
	assert.Regexp(t, `probe   c0 stable: GET http://127\.0\.0\.1:\d+/readyz\?verbose -> 200 OK\n(?s:.*)\[\+\]upgrade ok\n(?s:.*)readyz check passed`, s)
	// c0's critical chain ends at an entry nothing waited for, and follows
	// After back to one that waited for nothing.
	assert.Regexp(t, `\ncritical chain of c0 \(@ when each gate opened, \+ how long it took after its input\)\n  (workers|api-port) @\S+ \+\S+\n  └─`, s)
	assert.NotContains(t, s, "holding:", "no -hold, no hold")
	assert.Regexp(t, `refusals retried          [1-9]\d* agent dials refused while an api port was closed; [1-9]\d* controller calls \(HTTP, gRPC unary and stream\) refused`, s)
}

// assertStartupFiles checks what -trace and -svg wrote: one trace with a
// process per controller, each with its board's entries and its critical
// chain, and one picture with a swimlane per controller.
func assertStartupFiles(t *testing.T, tracePath, svgPath string) {
	t.Helper()
	body, err := os.ReadFile(tracePath)
	require.NoError(t, err)
	var trace struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Pid  int            `json:"pid"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(body, &trace))
	processes := map[int]string{}
	bars := map[int][]string{}
	chain := map[int]int{}
	for _, ev := range trace.TraceEvents {
		switch {
		case ev.Ph == "M" && ev.Name == "process_name":
			processes[ev.Pid] = ev.Args["name"].(string)
		case ev.Ph == "X" && ev.Cat == "critical": // its critical chain's track
			chain[ev.Pid]++
		case ev.Ph == "X":
			bars[ev.Pid] = append(bars[ev.Pid], ev.Name)
		}
	}
	assert.Equal(t, map[int]string{1: "c0", 2: "c1", 3: "c2"}, processes)
	for pid := 1; pid <= 3; pid++ {
		assert.Equal(t, []string{"serving", "self-dial", "upgrade", "lease", "stable", "api-port", "workers"}, bars[pid], "process %d: a track per entry", pid)
		assert.GreaterOrEqual(t, chain[pid], 3, "process %d: its critical chain", pid)
	}
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(svg, new(struct{})), "well-formed")
	assert.Contains(t, string(svg), "startup timeline: 3 boards, 21 gates")
	for _, c := range []string{"c0", "c1", "c2"} {
		assert.Contains(t, string(svg), `data-board="`+c+`"`)
	}
}

// assertLogRecords checks that every component was given the logger: each
// controller's board, listener, dialer (and its HTTP transport) and upgrade
// gate wrote their records, with the house keys and the controller's name.
func assertLogRecords(t *testing.T, logs string) {
	t.Helper()
	seen := map[string]map[string]bool{} // msg -> controllers
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		msg, _ := r["msg"].(string)
		ctrl, _ := r["controller"].(string)
		if seen[msg] == nil {
			seen[msg] = map[string]bool{}
		}
		seen[msg][ctrl] = true
		switch msg {
		case "gate opened":
			assert.Contains(t, r, "gate", line)
		case "port bound", "port opened", "port closed":
			assert.Contains(t, r, "port", line)
			assert.Contains(t, r, "addr", line)
		case "route chosen":
			assert.Equal(t, "local", r["route"], line)
		case "upgrade phase changed":
			assert.Contains(t, r, "phase", line)
		case "lease held", "lease held by another":
			assert.Equal(t, leaseName, r["lease"], line)
			assert.Contains(t, r, "holder", line)
		}
	}
	// One controller holds the lease, the others are told who does.
	assert.Len(t, seen["lease held"], 1, logs)
	assert.Len(t, seen["lease held by another"], 2, logs)
	// The store fault, as an operator reads it: renewals not confirmed,
	// then confirmed again — never "lease lost".
	assert.Len(t, seen["lease renewal not confirmed"], 1, logs)
	assert.Len(t, seen["lease confirmed again"], 1, logs)
	assert.Empty(t, seen["lease lost"], logs)
	// The listener and the dialer count, they do not log counts.
	for _, msg := range []string{"dials", "dials failed", "connections rate-limited or refused", "accept errors retried"} {
		assert.Empty(t, seen[msg], msg)
	}
	for _, msg := range []string{"gate opened", "port bound", "port opened", "port closed", "route chosen", "upgrade phase changed", "lease tracker closed"} {
		for _, c := range []string{"c0", "c1", "c2"} {
			assert.True(t, seen[msg][c], "no %q record from %s:\n%s", msg, c, logs)
		}
	}
}

// A run cut short (by -timeout here, by Ctrl-C under -hold) ends with an
// error naming what did not finish, not a panic: agents stopped mid-call
// fail with errors of different types (ctx's, *url.Error, Retry's).
func TestRunCutShortIsAnErrorNotAPanic(t *testing.T) {
	o, err := parseFlags([]string{"-agents", "300", "-timeout", "300ms"}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	logs := logtest.New()
	assert.Error(t, run(context.Background(), o, &out, logs.Logger()), out.String())
	// The controllers are shut down when run returns: no record after it
	// (a board following the listener's API port once logged "gate failed
	// ... use of closed network connection" here, after Run had returned).
	logs.Seal(t)
	for _, r := range logs.Records() {
		if r.Message == "gate failed" {
			assert.NotContains(t, r.Str("err"), "closed network connection", "the board was closed before the listener: %v", r)
		}
	}
}

func TestFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3, o.controllers)
	assert.Equal(t, 3000, o.agents)
	assert.Equal(t, 500*time.Millisecond, o.leaseTerm)

	_, err = parseFlags([]string{"-fault", "0s"}, io.Discard)
	assert.NoError(t, err, "no fault at all")

	var help bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &help)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	for _, f := range []string{"-controllers", "-agents", "-api-rate", "-api-burst", "-steps", "-lease", "-fault", "-timeout"} {
		assert.Contains(t, help.String(), f)
	}

	for _, bad := range [][]string{
		{"-controllers", "0"}, {"-agents", "-1"}, {"-api-rate", "0"}, {"-lease", "0s"},
		{"-fault", "-1s"}, {"-timeout", "0s"}, {"-agent-backoff", "0s"}, {"-nonsense"},
		{"-controllers", "10"}, {"-agents", "10001"}, {"-api-burst", "-1"},
		{"-fault", "100ms"}, // never reaches a check
		{"-fault", "2s"},    // outlasts the 1s term: the leader could not keep it
	} {
		_, err := parseFlags(bad, io.Discard)
		assert.Error(t, err, strings.Join(bad, " "))
	}
}

// TestSummaryNamesEveryBrokenInvariant measures the record of a run that
// broke each invariant and checks that each is reported: the checks
// themselves must not be able to pass vacuously.
func TestSummaryNamesEveryBrokenInvariant(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "2", "-agents", "10", "-api-rate", "100", "-api-burst", "5"}, io.Discard)
	require.NoError(t, err)
	order := []string{"serving", "self-dial", "upgrade", "lease", "stable", "api-port"}
	mk := func(name string, opened ...string) *controller {
		c := &controller{name: name, board: gate.NewBoard(gate.BoardConfig{})}
		locks := map[string]*gate.Lock{}
		for _, g := range order {
			locks[g] = gate.New(g)
			c.board.Add(g, locks[g])
		}
		for _, g := range opened {
			locks[g].Unlock()
		}
		c.workers = gate.New("workers")
		c.calls = []*selfCall{newSelfCall("POST /controller/workers")}
		return c
	}
	c0 := mk("c0", "api-port", "serving", "self-dial", "upgrade", "lease", "stable") // api port first
	c1 := mk("c1", order...)
	c0.upgradeAtAPI, c1.upgradeAtAPI = upgrade.PhaseRunningSteps, upgrade.PhaseComplete
	c0.earlyAPI = 1
	now := time.Now()
	for range 40 { // 40 conns at one instant: the limit allows 5 + 100/s × 250ms = 30
		c0.apiAccepts = append(c0.apiAccepts, now)
	}
	c0.status = lease.Status{State: lease.Held, Token: 7}
	c1.leaseErr = errors.New("timeout") // never told who leads
	agents := &agentStats{perCtrl: []portStats{{agents: 5}, {agents: 5}}}
	agents.perCtrl[0].admitted.Store(5)
	agents.perCtrl[1].admitted.Store(4)
	agents.upgrading.Store(3)

	c0.calls[0].n.Store(1)
	c0.calls[0].finish(nil)
	s := measure(o, []*controller{c0, c1}, agents, c0, faultReport{})
	// 1 of 3 self-dials to a peer: what the dialers' Reports would say.
	s.ctrls[0].selfDials, s.ctrls[0].local = 2, 1
	s.ctrls[1].selfDials, s.ctrls[1].local = 1, 1
	s.starting = readyzAnswer{who: "c0", url: "http://127.0.0.1:1/readyz?verbose", err: errors.New("connection refused")}
	s.stable = readyzAnswer{who: "c0", code: 503, body: "[-]workers locked for 1s\nreadyz check failed\n"}
	problems := strings.Join(s.violations(), "\n")
	for _, want := range []string{
		"1 of 3 self-dials went to a peer",
		"1 agents not admitted",
		`refused 3 times with "upgrade in progress"`,
		"c0 accepted 40 API conns in 250ms",
		`c1 was not told that c0 leads`,
		"c0: the api port accepted 1 agent connections before the controller was stable",
		`c0: the api port did not open after "stable"`,
		"c0: none of its 5 agents was refused before its api port opened",
		"c1: its calls were never refused during the upgrade: POST /controller/workers",
		"c1: a call refused during the upgrade never went through: POST /controller/workers: still refused when the run ended",
		"c0: the api port opened while the upgrade was running-steps",
		"GET http://127.0.0.1:1/readyz?verbose: connection refused",
		"c0 answered 503, not 200",
	} {
		assert.Contains(t, problems, want)
	}
}

// healthySummary is the record of a run in which every story happened and
// every invariant held.
func healthySummary() *summary {
	o := options{agents: 200, apiRate: 100, apiBurst: 5, fault: 600 * time.Millisecond}
	s := &summary{o: o, leader: "c0", leaderToken: 1, leadRuns: 1,
		starting: readyzAnswer{who: "c0", code: 503, body: "[+]serving ok\n[-]upgrade locked for 300ms\nreadyz check failed\n"},
		stable:   readyzAnswer{who: "c0", code: 200, body: "[+]serving ok\n[+]upgrade ok\nreadyz check passed\n"},
	}
	s.agents.admitted, s.agents.refused = 200, 40
	for _, name := range []string{"c0", "c1"} {
		c := ctrlSummary{
			name: name, selfDials: 2, local: 2, callsRefused: 1, workersAccepted: true, upgradeAtAPI: upgrade.PhaseComplete,
			agents: 100, admitted: 100, refused: 20, peak: 30, throttled: 800 * time.Millisecond,
			opened: []string{"serving", "lease", "self-dial", "upgrade", "stable", "api-port"},
		}
		if name != "c0" {
			c.leaseErr = &lease.NotLeaderError{Name: leaseName, Holder: "c0"}
		}
		s.ctrls = append(s.ctrls, c)
	}
	s.fault = faultReport{ran: true, held: 9, failed: 6,
		before: lease.Status{State: lease.Held, Token: 1}, after: lease.Status{State: lease.Held, Token: 1}}
	return s
}

// TestChecksCatchEachMissingStory breaks one story or invariant at a time in
// a healthy record: exactly the check that guards it must name it.
func TestChecksCatchEachMissingStory(t *testing.T) {
	require.Empty(t, healthySummary().violations())
	for _, tc := range []struct {
		check   string
		breakIt func(s *summary)
		want    string
	}{
		{"self-dials local", func(s *summary) { s.ctrls[1].local = 1 }, "1 of 4 self-dials went to a peer"},
		{"self-dials local", func(s *summary) { s.ctrls[1].selfDials, s.ctrls[1].local = 0, 0 }, "c1 never dialled itself"},
		{"agents admitted", func(s *summary) { s.agents.admitted = 199 }, "1 agents not admitted"},
		{"agents refused while the api port was closed", func(s *summary) { s.ctrls[1].refused = 0 }, "c1: none of its 100 agents was refused"},
		{"api port opens only once stable", func(s *summary) { s.ctrls[0].earlyAPI = 2 }, "c0: the api port accepted 2 agent connections"},
		{"api port opens only once stable", func(s *summary) { s.ctrls[1].upgradeAtAPI = upgrade.PhaseFailed }, "c1: the api port opened while the upgrade was failed"},
		{"rate limit", func(s *summary) { s.ctrls[0].peak = 40 }, "c0 accepted 40 API conns in 250ms"},
		{"rate limit", func(s *summary) { s.ctrls[1].throttled = 0 }, "c1: the limiter never held back its 100 agents"},
		{"controller calls refused during the upgrade, then accepted", func(s *summary) { s.ctrls[0].callsRefused = 0 }, "c0: its calls were never refused"},
		{"controller calls refused during the upgrade, then accepted", func(s *summary) {
			s.ctrls[0].neverRefused = []string{"grpc Health/Watch"}
		}, "c0: its calls were never refused during the upgrade: grpc Health/Watch"},
		{"controller calls refused during the upgrade, then accepted", func(s *summary) {
			s.ctrls[1].workersAccepted, s.ctrls[1].callErr = false, errors.New("ctx done")
		}, "c1: a call refused during the upgrade never went through: ctx done"},
		{"followers told who leads", func(s *summary) { s.leader = "" }, "no controller holds the lease"},
		{"followers told who leads", func(s *summary) { s.ctrls[1].leaseErr = nil }, "c1 was not told that c0 leads"},
		{"lease fault: renewal failed, never not-leader", func(s *summary) { s.fault.failed = 0 }, "no check during the fault of 600ms answered ErrRenewalFailed"},
		{"lease fault: renewal failed, never not-leader", func(s *summary) {
			s.fault.notLeader, s.fault.firstNotLeader = 1, lease.ErrNotLeader
		}, `leader c0 was told "lease: not the leader" 1 times`},
		{"lease fault: renewal failed, never not-leader", func(s *summary) { s.fault.after.Token = 2 }, "leader c0 lost its term: token 1 became 2"},
		{"lease fault: renewal failed, never not-leader", func(s *summary) {
			s.leadStop = &lease.NotLeaderError{Name: leaseName, Err: leasestore.ErrNotHeld}
		}, "leader c0's singular worker was stopped by: lease"},
		{"lease fault: renewal failed, never not-leader", func(s *summary) { s.leadRuns = 0 }, "leader c0's singular worker never ran under Lead"},
		{"readiness probe: 503 while starting, 200 once stable", func(s *summary) { s.starting.code = 200 }, "c0 answered 200, not 503 with [-] lines, while starting"},
		{"readiness probe: 503 while starting, 200 once stable", func(s *summary) {
			s.starting.body = "[+]serving ok\nreadyz check failed\n"
		}, "c0 answered 503, not 503 with [-] lines"},
		{"readiness probe: 503 while starting, 200 once stable", func(s *summary) { s.stable.code = 503 }, "c0 answered 503, not 200"},
		{"readiness probe: 503 while starting, 200 once stable", func(s *summary) {
			s.stable.body = "[+]serving ok\n[-]upgrade locked for 1s\nreadyz check passed\n"
		}, "c0 answered 200, not 200"},
		{"readiness probe: 503 while starting, 200 once stable", func(s *summary) {
			s.stable.err = errors.New("connection refused")
		}, "connection refused"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s := healthySummary()
			tc.breakIt(s)
			problems := s.violations()
			require.Len(t, problems, 1, "only the broken check reports")
			assert.True(t, strings.HasPrefix(problems[0], tc.check+": "), "%q is reported by %q", problems[0], tc.check)
			assert.Contains(t, problems[0], tc.want)
		})
	}
}

// TestNewControllerReleasesPortsOnError makes newController fail after it
// bound its controller port and checks that the port is free again (and,
// through TestMain's goleak, that nothing it started is left running).
func TestNewControllerReleasesPortsOnError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		setup func(cfg *controllerConfig)
		bound bool // the failure comes after the controller port is bound
	}{
		{"API port bind fails", func(cfg *controllerConfig) { cfg.apiAddr = taken.Addr().String() }, true},
		// The tracker comes before the board, which follows it.
		{"lease tracker refuses its config", func(cfg *controllerConfig) { cfg.o.leaseTerm = 0 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := controllerConfig{name: "c0", ctrlAddr: "127.0.0.1:0", apiAddr: "127.0.0.1:0", version: agentVersion, o: o, tl: newTimeline(&out), store: leasestore.NewMemStore(leasestore.MemStoreConfig{})}
			tc.setup(&cfg)
			c, err := newController(cfg)
			require.Error(t, err)
			assert.Nil(t, c)
			m := regexp.MustCompile(`controller port bound at (\S+)`).FindStringSubmatch(out.String())
			if !tc.bound {
				assert.Nil(t, m, "nothing was bound: %s", out.String())
				return
			}
			require.NotNil(t, m, "the controller port was bound first: %s", out.String())
			ln, err := net.Listen("tcp", m[1])
			require.NoError(t, err, "the controller port %s is still bound", m[1])
			ln.Close()
		})
	}
}
