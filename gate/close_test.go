package gate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

// countingComponent counts the calls of its Cause and Detail methods.
type countingComponent struct {
	*component
	causes, details atomic.Int64
}

func (c *countingComponent) Cause() error {
	c.causes.Add(1)
	return c.component.Cause()
}

func (c *countingComponent) Detail() string {
	c.details.Add(1)
	return c.component.Detail()
}

// The incident: a newcomer's test panicked because the board's Follow
// goroutine logged "gate failed ... use of closed network connection"
// after Run had returned, when the listener closed its API port. A board
// entry following a component stops with the board: once Close has
// returned, nothing logs, no Component method is called, no resolution is
// recorded, and the Follow goroutines have ended.
func TestBoardFollowStopsWithTheBoard(t *testing.T) {
	running := goleak.IgnoreCurrent()
	logs := logtest.New()
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk, Logger: logs.Logger()})
	port := &countingComponent{component: newComponent("opens once stable")}
	api := b.Follow("api-port", port)
	serving, late := add(b, "serving"), add(b, "late")
	clk.Advance(time.Second)
	serving.Unlock()
	require.Len(t, logs.Matching("gate opened"), 1)

	closeWithin(t, b)
	logs.Seal(t)
	goleak.VerifyNone(t, running) // the Follow goroutine has ended
	causes, details := port.causes.Load(), port.details.Load()

	// The owner closes the listener after the board: its API port fails.
	port.fail(errors.New("accept tcp 127.0.0.1:17070: use of closed network connection"))
	late.Unlock()
	clk.Advance(time.Minute)
	r, tl := b.Report(), b.Timeline()

	assert.Equal(t, causes, port.causes.Load(), "no Cause call after Close")
	assert.Equal(t, details, port.details.Load(), "no Detail call after Close")
	assert.False(t, isClosed(api.Done()), "the entry's gate was not resolved after Close")
	assert.Equal(t, []gate.State{gate.StateLocked, gate.StateUnlocked, gate.StateLocked},
		[]gate.State{r[0].State, r[1].State, r[2].State}, "the board as it was when closed")
	assert.Equal(t, time.Second, r[0].For, "a locked entry's wait ends at Close")
	assert.Equal(t, time.Second, tl.End, "the timeline ends at Close")
	assert.Equal(t, "waiting on api-port (1s), late (1s); 1 open", r.String())

	// What is added after Close is shown, and followed no more.
	after := &countingComponent{component: newComponent("never asked")}
	close(after.completed)
	b.Follow("after", after)
	add(b, "after-lock").Unlock()
	goleak.VerifyNone(t, running)
	assert.Equal(t, gate.StateLocked, b.Report()[3].State)
	assert.Zero(t, after.causes.Load()+after.details.Load())
}

// closeWithin closes b, failing the test if Close has not returned after
// 10s (a failure bound: it returns at once).
func closeWithin(t *testing.T, b *gate.Board) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close has not returned: a goroutine of the board is still following")
	}
}

// Close returns only once a record under way has been written: a
// handler that is still writing when Close is called finishes before
// Close returns, so nothing is written after it.
func TestBoardCloseWaitsForARecordUnderWay(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	logs := &capture{during: func() {
		close(entered)
		<-release
	}}
	b := gate.NewBoard(gate.BoardConfig{Logger: slog.New(logs)})
	l := add(b, "lease")
	go l.Fail(errors.New("no quorum"))
	<-entered

	closed := make(chan error)
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a record was being written")
	case <-time.After(20 * time.Millisecond): // a failure bound: Close must still be waiting
	}
	close(release)
	require.NoError(t, <-closed)
	assert.Len(t, logs.all(), 1)
}

// Close is idempotent and safe to call concurrently; each call returns
// once the board is quiet.
func TestBoardCloseIsIdempotent(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := newComponent("")
	b.Follow("upgrade", c)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, b.Close())
		}()
	}
	wg.Wait()
	assert.NoError(t, b.Close())
}

// An owner's ordinary cancellation (its ctx canceled, a SIGTERM) fails a
// gate, and that is the plan, not a warning: Info. Any other cause is a
// Warn.
func TestBoardLogsCanceledAsInfo(t *testing.T) {
	logs := logtest.New()
	b := gate.NewBoard(gate.BoardConfig{Logger: logs.Logger()})
	upgrade := newComponent("running upgrade steps")
	entry := b.Follow("upgrade", upgrade)
	lease := add(b, "lease")
	stable := gate.AllOf("stable", entry, lease)
	put(b, stable)

	upgrade.fail(fmt.Errorf("upgrade steps: %w", context.Canceled))
	<-stable.Done()
	lease.Fail(errors.New("no quorum"))
	require.NoError(t, b.Close())
	logs.Seal(t)

	levels := map[string]slog.Level{}
	for _, r := range logs.Matching("gate failed") {
		levels[r.Str("gate")] = r.Level
	}
	assert.Equal(t, map[string]slog.Level{
		"upgrade": slog.LevelInfo,
		"stable":  slog.LevelInfo, // failed with the upgrade's cause
		"lease":   slog.LevelWarn,
	}, levels)
}

// gate is the core every other package's signals are built on; HTTP is
// presentation (package gate/boardview). The core must not pull in
// net/http, nor anything that does.
func TestGateImportsNoNetHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/coldstart-go/coldstart/gate")
	assert.NotContains(t, deps, "net/http")
}
