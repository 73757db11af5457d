package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/listener"
	"github.com/coldstart-go/coldstart/upgrade"
)

// TestReadinessAcrossStartup probes one controller's /readyz on its
// controller port before its startup, while its upgrade is held, and once
// it is stable: 503 naming what it waits on, then 200. Each probe's place
// is fixed by gates and channels, not by timing.
func TestReadinessAcrossStartup(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "1", "-agents", "0", "-serve-after", "10ms", "-checking", "10ms", "-steps", "10ms"}, io.Discard)
	require.NoError(t, err)
	held := make(chan struct{})
	c, err := newController(controllerConfig{name: "c0", ctrlAddr: "127.0.0.1:0", apiAddr: "127.0.0.1:0", version: agentVersion, o: o,
		tl: newTimeline(io.Discard), store: leasestore.NewMemStore(leasestore.MemStoreConfig{}), upgradeHold: held})
	require.NoError(t, err)
	defer c.shutdown()
	require.NoError(t, c.up.SetRetryAfter(10*time.Millisecond)) // the refused self-call retries sooner
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	before := probeReadyz(ctx, c)
	assert.Empty(t, before.problem(false), "before the startup")
	for _, g := range []string{"serving", "self-dial", "upgrade", "stable", "api-port", "workers"} {
		assert.Regexp(t, `(?m)^\[-\]`+g+` locked for \d`, before.body)
	}
	// The tracker claims from newController on: its entry may be open
	// already, or says why not in the tracker's words.
	assert.Regexp(t, `(?m)^(\[-\]lease locked for \S+ \(unknown: claim not confirmed: no answer from the store yet\)|\[\+\]lease ok)$`, before.body)
	assert.Equal(t, http.StatusServiceUnavailable, get(ctx, t, c, "/ping"), "only /readyz answers before the server is up")

	runs := startControllers(context.Background())
	defer runs.stop()
	runs.start(c, nil, o.serveAfter)
	require.True(t, c.allRefused(ctx))
	during := probeReadyz(ctx, c)
	assert.Empty(t, during.problem(false), "while the upgrade is held")
	for _, line := range []string{"[+]serving ok", "[+]self-dial ok", "[-]upgrade locked for ", "[-]stable locked for "} {
		assert.Contains(t, during.body, line)
	}
	assert.Equal(t, http.StatusOK, get(ctx, t, c, "/ping"), "the server is up")

	close(held)
	require.NoError(t, gate.Wait(ctx, c.workers))
	after := probeReadyz(ctx, c)
	assert.Empty(t, after.problem(true), "once stable")
	assert.Contains(t, after.body, "[+]upgrade ok\n[+]lease ok\n[+]stable ok\n[+]api-port ok\n[+]workers ok\nreadyz check passed\n")
}

// get returns the status of GET path on c's controller port.
func get(ctx context.Context, t *testing.T, c *controller, path string) int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.ctrlAddr+path, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestHoldServesUntilInterrupted runs the main job with -hold: after the
// summary it prints a curl line per controller, each of which answers 200;
// ending ctx (what SIGINT does in main) shuts it down, run returns nil, and
// TestMain's goleak finds nothing left running.
func TestHoldServesUntilInterrupted(t *testing.T) {
	// 15 agents per port, within the burst: the rate-limit check has
	// nothing to hold back.
	o, err := parseFlags([]string{"-hold", "-controllers", "2", "-agents", "30", "-api-burst", "20", "-steps", "100ms", "-lease", "1s", "-fault", "0s"}, io.Discard)
	require.NoError(t, err)
	out := newWaitWriter()
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, out, nil) }()

	// The last curl line printed: c1's last endpoint.
	holding := out.waitFor(t, holdEndpoints[len(holdEndpoints)-1].path+"'   # c1")
	urls := regexp.MustCompile(`curl -s '(http://\S+)'   # (c\d): `).FindAllStringSubmatch(holding, -1)
	require.Len(t, urls, 2*len(holdEndpoints), holding)
	leaders := 0 // controllers whose leader gauge says 1
	for _, u := range urls {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(u[1])
		require.NoError(t, err, u[1])
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, u[1])
		switch path := u[1][strings.Index(u[1][len("http://"):], "/")+len("http://"):]; path {
		case "/readyz?verbose":
			assert.True(t, strings.HasSuffix(string(body), "readyz check passed\n"), "%s: %s", u[1], body)
		case "/timeline": // the board's critical chain, back to a gate that waited for nothing
			assert.Regexp(t, `(?m)^(workers|api-port) @\S+ \+\S+\n└─`, string(body), u[1])
		case "/timeline?format=json":
			var tl struct {
				Entries []struct{ Name, State string }
			}
			require.NoError(t, json.Unmarshal(body, &tl), u[1])
			assert.Len(t, tl.Entries, 7, u[1])
			for _, e := range tl.Entries {
				assert.Equal(t, "unlocked", e.State, "%s: %s", u[1], e.Name)
			}
		case "/metrics": // the collectors read the same Reports the summary did
			name := u[2]
			for _, series := range []string{
				`coldstart_gate_state{board="` + name + `",gate="stable",state="unlocked"} 1`,
				`coldstart_upgrade_phase{phase="complete",upgrade="` + name + `"} 1`,
				`coldstart_dialer_dials_total{dialer="` + name + `",route="peer"} 0`,
				`coldstart_listener_open{listener="` + name + `",port="api"} 1`,
				`coldstart_lease_state{lease="singular-controller",state="`,
				`leader_election_master_status{name="singular-controller"} `,
				`coldstart_lease_store_calls_total{operation="claim",outcome="ok",store="` + name + `"} `,
			} {
				assert.Contains(t, string(body), series, u[1])
			}
			assert.Regexp(t, `coldstart_dialer_dials_total\{dialer="`+name+`",route="local"\} [1-9]`, string(body), u[1])
			if m := regexp.MustCompile(`\nleader_election_master_status\{name="singular-controller"\} (\d)\n`).FindStringSubmatch(string(body)); assert.NotNil(t, m, u[1]) {
				leaders += int(m[1][0] - '0')
			}
		case "/timeline?format=trace": // the board as a process named for its controller
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), u[1])
			assert.Contains(t, string(body), `{"name":"process_name","ph":"M",`, u[1])
			assert.Contains(t, string(body), `"args":{"name":"`+u[2]+`"}`, u[1])
		case "/timeline?format=svg":
			assert.Equal(t, "image/svg+xml", strings.Split(resp.Header.Get("Content-Type"), ";")[0], u[1])
			assert.NoError(t, xml.Unmarshal(body, new(struct{ XMLName xml.Name })), "well-formed XML: %s", u[1])
		default:
			t.Errorf("unexpected endpoint %s", u[1])
		}
	}
	assert.Equal(t, 1, leaders, "one controller leads, as client-go's gauge tells a dashboard")
	interrupt()
	require.NoError(t, <-done)
	assert.Contains(t, out.String(), "ok: every invariant held")
	assert.True(t, strings.HasSuffix(out.String(), "interrupted: shutting down\n"), out.String())
}

// waitWriter is a buffer whose reader can wait for some text to appear.
type waitWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newWaitWriter() *waitWriter { return &waitWriter{changed: make(chan struct{})} }

func (w *waitWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.buf.Write(p)
}

func (w *waitWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor returns the output once it contains s.
func (w *waitWriter) waitFor(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		text, changed := w.buf.String(), w.changed
		w.mu.Unlock()
		if strings.Contains(text, s) {
			return text
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no %q in the output within 30s:\n%s", s, text)
		}
	}
}

// TestReadyzPassesTheUpgradeGateInEveryPhase: /readyz is on the upgrade
// middleware's allowlist, so the board answers in every phase, while a
// call off the allowlist is refused until the upgrade completes.
func TestReadyzPassesTheUpgradeGateInEveryPhase(t *testing.T) {
	for _, tc := range []struct {
		phase      string
		enter      func(g *upgrade.Gate)
		workerCode int // POST /controller/workers, off the allowlist
	}{
		{"checking", func(*upgrade.Gate) {}, http.StatusServiceUnavailable},
		{"running-steps", func(g *upgrade.Gate) { require.NoError(t, g.Enter(upgrade.PhaseRunningSteps)) }, http.StatusServiceUnavailable},
		{"failed", func(g *upgrade.Gate) { g.Fail(errors.New("steps failed")) }, http.StatusConflict},
		{"complete", func(g *upgrade.Gate) { g.Complete() }, http.StatusOK},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			tr, err := lease.NewTracker(lease.Config{Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}),
				Name: leaseName, Holder: "c0", Duration: time.Minute})
			require.NoError(t, err)
			defer tr.Close()
			c := &controller{name: "c0", up: upgrade.NewGate(upgrade.GateConfig{}), tracker: tr,
				serving: gate.New("serving"), ctrlAddr: "127.0.0.1:17071"}
			c.dial, err = c.newDialer(nil)
			require.NoError(t, err)
			c.board = gate.NewBoard(gate.BoardConfig{Name: c.name})
			c.fillBoard()
			defer c.board.Close()
			c.serving.Unlock()
			c.mux, c.grpc = c.newMux(), c.newGRPC()
			h := c.handler()
			tc.enter(c.up)
			require.Equal(t, tc.phase, c.up.Report().Phase.String())

			readyz := httptest.NewRecorder()
			h.ServeHTTP(readyz, httptest.NewRequest(http.MethodGet, "/readyz?verbose", nil))
			assert.Equal(t, http.StatusServiceUnavailable, readyz.Code, "stable is still locked")
			assert.Contains(t, readyz.Body.String(), "[+]serving ok\n", "the board answered, not the upgrade gate")

			workers := httptest.NewRecorder()
			h.ServeHTTP(workers, httptest.NewRequest(http.MethodPost, "/controller/workers", nil))
			assert.Equal(t, tc.workerCode, workers.Code, workers.Body.String())
		})
	}
}

// TestAPIPortBindFailureIsOnTheBoard: the API port opens by itself once
// stable (OpenAPIWhen); when its address has been taken meanwhile, the
// bind failure is not lost in a goroutine but shown on the board, with its
// cause, and the controller port serves on.
func TestAPIPortBindFailureIsOnTheBoard(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "1", "-agents", "0"}, io.Discard)
	require.NoError(t, err)
	c, err := newController(controllerConfig{name: "c0", ctrlAddr: "127.0.0.1:0", apiAddr: "127.0.0.1:0", version: agentVersion, o: o,
		tl: newTimeline(io.Discard), store: leasestore.NewMemStore(leasestore.MemStoreConfig{})})
	require.NoError(t, err)
	defer c.shutdown()
	taken, err := net.Listen("tcp", c.apiAddress()) // released by CloseAPI until stable
	require.NoError(t, err)
	defer taken.Close()

	c.serving.Unlock()
	c.selfDialed.Unlock()
	c.leaseKnown.Unlock()
	c.up.Complete()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.True(t, closed(ctx, c.api.Done()))
	require.ErrorIs(t, c.api.Err(), listener.ErrBind)
	a := probeReadyz(ctx, c)
	assert.Equal(t, http.StatusServiceUnavailable, a.code)
	assert.Regexp(t, `\[-\]api-port failed: listener: bind api port \S+: .*address already in use\n`, a.body)
	assert.Contains(t, a.body, "[+]stable ok\n")
}
