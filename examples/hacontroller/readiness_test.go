package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
)

// TestReadinessAcrossStartup probes one controller's /readyz on its
// controller port before its startup, while its upgrade is held, and once
// it is stable: 503 naming what it waits on, then 200. Each probe's place
// is fixed by gates and channels, not by timing.
func TestReadinessAcrossStartup(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "1", "-agents", "0", "-serve-after", "10ms", "-checking", "10ms", "-steps", "10ms"}, io.Discard)
	require.NoError(t, err)
	held := make(chan struct{})
	c, err := newController(controllerConfig{name: "c0", apiAddr: "127.0.0.1:0", o: o,
		tl: newTimeline(io.Discard), store: lease.NewMemStore(nil), upgradeHold: held})
	require.NoError(t, err)
	defer c.shutdown()
	require.NoError(t, c.up.SetRetryAfter(10*time.Millisecond)) // the refused self-call retries soon
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	before := probeReadyz(ctx, c)
	assert.Empty(t, before.problem(false), "before the startup")
	for _, g := range []string{"serving", "self-dial", "upgrade", "lease", "stable", "api-port", "workers"} {
		assert.Regexp(t, `(?m)^\[-\]`+g+` locked for \d`, before.body)
	}
	assert.Equal(t, http.StatusServiceUnavailable, get(ctx, t, c, "/ping"), "only /readyz answers before the server is up")

	stop := startControllers(context.Background(), o, []*controller{c}, closedChan())
	defer stop()
	require.True(t, closed(ctx, c.callRefused))
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

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// TestHoldServesUntilInterrupted runs the main job with -hold: after the
// summary it prints a curl line per controller, each of which answers 200;
// ending ctx (what SIGINT does in main) shuts it down, run returns nil, and
// TestMain's goleak finds nothing left running.
func TestHoldServesUntilInterrupted(t *testing.T) {
	// 15 agents per port, within the burst: the rate-limit check has
	// nothing to hold back.
	o, err := parseFlags([]string{"-hold", "-controllers", "2", "-agents", "30", "-api-burst", "20", "-steps", "100ms", "-fault", "0s"}, io.Discard)
	require.NoError(t, err)
	out := newWaitWriter()
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, out) }()

	holding := out.waitFor(t, "# c1\n")
	urls := regexp.MustCompile(`curl -s '(http://\S+/readyz\?verbose)'   # (c\d)`).FindAllStringSubmatch(holding, -1)
	require.Len(t, urls, 2, holding)
	for _, u := range urls {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(u[1])
		require.NoError(t, err, u[2])
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, u[2])
		assert.True(t, strings.HasSuffix(string(body), "readyz check passed\n"), "%s: %s", u[2], body)
	}
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
