package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunHoldsEveryInvariant runs the main job at a small scale: every
// self-dial local, every agent admitted, the leader keeps its term through
// the store fault, and each API port opens only once its controller is stable.
func TestRunHoldsEveryInvariant(t *testing.T) {
	// 100 agents per API port at 200/s with burst 10: the accept-rate
	// check has something to bite on (a missing limiter admits them all in
	// one 250ms window, above its 60).
	o, err := parseFlags([]string{"-agents", "300", "-api-rate", "200", "-api-burst", "10", "-steps", "200ms", "-fault", "700ms"}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(o, &out), out.String())
	s := out.String()
	m := regexp.MustCompile(`controller self-dials     (\d+)/(\d+) local \(0 to peers\)`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	assert.Equal(t, m[1], m[2], "every self-dial local")
	assert.Contains(t, s, "agents admitted           300/300")
	assert.Contains(t, s, "0 not-leader")
	assert.Contains(t, s, "ok: every invariant held")
	for _, c := range []string{"c0", "c1", "c2"} {
		assert.Contains(t, s, c+"      self-dial -> 127.0.0.1:")
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

// TestSummaryNamesEveryBrokenInvariant feeds summarize the record of a run
// that broke each invariant and checks that each is reported: the checks
// themselves must not be able to pass vacuously.
func TestSummaryNamesEveryBrokenInvariant(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "2", "-agents", "10", "-api-rate", "100", "-api-burst", "5"}, io.Discard)
	require.NoError(t, err)
	order := []string{"serving", "self-dial", "upgrade", "lease", "stable", "api-port"}
	mk := func(name string, opened ...string) *controller {
		c := &controller{name: name, board: gate.NewBoard(nil)}
		locks := map[string]*gate.Lock{}
		for _, g := range order {
			locks[g] = c.board.New(g)
		}
		for _, g := range opened {
			locks[g].Unlock()
		}
		return c
	}
	c0 := mk("c0", "api-port", "serving", "self-dial", "upgrade", "lease", "stable") // api port first
	c1 := mk("c1", order...)
	c0.routes = []dialer.Route{{Addr: "127.0.0.1:1", Local: true}, {Addr: "127.0.0.1:2", Local: false}}
	c1.routes = []dialer.Route{{Addr: "127.0.0.1:3", Local: true}}
	c0.earlyAPI = 1
	now := time.Now()
	for range 40 { // 40 conns at one instant: the limit allows 5 + 100/s × 250ms = 30
		c0.apiAccepts = append(c0.apiAccepts, now)
	}
	c0.status = lease.Status{State: lease.Held, Token: 7}
	c1.leaseErr = errors.New("timeout") // never told who leads
	agents := &agentStats{perCtrl: make([]atomic.Int64, 2)}
	agents.admitted.Store(9)
	agents.upgrading.Store(3)

	problems := strings.Join(summarize(io.Discard, o, []*controller{c0, c1}, agents, c0), "\n")
	for _, want := range []string{
		"1 of 3 self-dials went to a peer",
		"1 agents not admitted",
		`refused 3 times with "upgrade in progress"`,
		"c0 accepted 40 API conns in 250ms",
		`c1 was not told that c0 leads`,
		"c0: the api port accepted 1 agent connections before the controller was stable",
		`c0: the api port did not open after "stable"`,
	} {
		assert.Contains(t, problems, want)
	}
}
