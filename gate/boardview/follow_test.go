package boardview_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// component is a Component kept outside the board, as an upgrade gate is:
// it says what it is doing, and why it failed, in its own words.
type component struct {
	completed, failed chan struct{}
	mu                sync.Mutex
	detail            string
	cause             error
}

func newComponent(detail string) *component {
	return &component{completed: make(chan struct{}), failed: make(chan struct{}), detail: detail}
}

func (c *component) Completed() <-chan struct{} { return c.completed }
func (c *component) Failed() <-chan struct{}    { return c.failed }

func (c *component) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

func (c *component) Detail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detail
}

func (c *component) set(detail string) {
	c.mu.Lock()
	c.detail = detail
	c.mu.Unlock()
}

func (c *component) fail(cause error) {
	c.mu.Lock()
	c.cause, c.detail = cause, "failed"
	c.mu.Unlock()
	close(c.failed)
}

// The incident: the board said "[-]upgrade failed: its failed channel is
// closed" and never the phase, so the user copied the upgrade's state into
// a gate by hand. A followed component's words reach every answer.
func TestBoardFollowShowsCauseAndDetail(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	add(b, "api-port").Unlock()
	c := newComponent("checking whether new agent binaries are needed")
	entry := b.Follow("upgrade", c)
	clk.Advance(time.Second)
	c.set("running upgrade steps")
	clk.Advance(2 * time.Second)

	rec := serve(b, "/readyz?verbose", "")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "[+]api-port ok\n[-]upgrade locked for 3s (running upgrade steps)\nreadyz check failed\n", rec.Body.String())
	assert.Equal(t, "waiting on upgrade (3s: running upgrade steps); 1 open", b.Report().String())
	assert.Equal(t, "running upgrade steps", jsonEntries(t, b)[1]["detail"])

	diskFull := errors.New("disk full")
	c.fail(fmt.Errorf("upgrade steps: %w", diskFull))
	<-entry.Done()
	rec = serve(b, "/readyz?verbose", "")
	assert.Equal(t, "[+]api-port ok\n[-]upgrade failed: upgrade steps: disk full\nreadyz check failed\n", rec.Body.String())
	r := b.Report()
	assert.ErrorIs(t, r[1].Err, diskFull, "the component's cause, not a copy of its text")
	assert.ErrorIs(t, entry.Err(), diskFull)
	assert.Empty(t, r[1].Detail, "a resolved entry has no detail")
	j := jsonEntries(t, b)[1]
	assert.Equal(t, "upgrade steps: disk full", j["error"])
	assert.Equal(t, "failed", j["state"])
	assert.NotContains(t, j, "detail")
}

func jsonEntries(t *testing.T, b *gate.Board) []map[string]any {
	t.Helper()
	rec := serve(b, "/readyz", "application/json")
	var out []map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return out
}

func TestBoardFollowCompletes(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := newComponent("running upgrade steps")
	stable := gate.AllOf("stable", b.Follow("upgrade", c))
	put(b, stable)
	close(c.completed)
	<-stable.Unlocked()
	assert.Equal(t, []string{"upgrade", "stable"}, b.Report().Opened())
	assert.Equal(t, "ok", serve(b, "/readyz", "").Body.String())
}

// detailWaiter is a foreign Waiter that says what it waits for.
type detailWaiter struct{ chanWaiter }

func (detailWaiter) Detail() string { return "no peer admitted us yet" }

func TestBoardAddShowsAWaitersDetail(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	b.Add("self-dial", detailWaiter{make(chanWaiter)})
	assert.Contains(t, serve(b, "/readyz", "").Body.String(), "[-]self-dial locked for 0s (no peer admitted us yet)\n")
}

// The handler's answers go through a real HTTP server as well as a recorder.
func TestBoardFollowOverHTTP(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := newComponent("running upgrade steps")
	b.Follow("upgrade", c)
	defer close(c.completed)
	srv := httptest.NewServer(boardview.ReadyHandler(b))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}
