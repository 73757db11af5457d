package upgrade_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/upgrade"
)

func TestRunStepsCompletes(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	var during upgrade.Phase
	require.NoError(t, g.RunSteps(context.Background(), func(context.Context) error {
		during = g.Phase()
		return nil
	}))
	assert.Equal(t, upgrade.PhaseRunningSteps, during)
	assert.Equal(t, upgrade.PhaseComplete, g.Phase())
}

// A step's own error fails the gate: clients get 409 with the cause and
// stop.
func TestRunStepsFailsOnAStepsOwnError(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	diskFull := errors.New("disk full")
	err := g.RunSteps(context.Background(), func(context.Context) error { return diskFull })
	assert.ErrorIs(t, err, diskFull)
	assert.EqualError(t, err, "upgrade steps: disk full")
	assert.Equal(t, upgrade.PhaseFailed, g.Phase())
	assert.ErrorIs(t, g.Cause(), diskFull)
	resp := serve(upgrade.Middleware(g, nil)(&served{}), "GET", "/")
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, "upgrade steps: disk full", decodeBody(t, resp)["cause"])
}

// The incident: SIGTERM mid-upgrade. The documented "if err := steps(ctx);
// err != nil { g.Fail(err) }" answered every client 409 "upgrade failed:
// context canceled" — stop for good — for an upgrade that the agent's next
// start would have run again. A ctx that ended leaves it in progress.
func TestRunStepsStoppedByCtxLeavesTheUpgradeInProgress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(ctx context.Context) error
	}{
		{name: "steps return ctx's error", steps: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{name: "steps return an error of their own after ctx ended", steps: func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("migration interrupted")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := upgrade.NewGate(upgrade.GateConfig{})
			ctx, sigterm := context.WithCancel(context.Background())
			done, started := make(chan error, 1), make(chan struct{})
			go func() {
				done <- g.RunSteps(ctx, func(ctx context.Context) error {
					close(started)
					return tc.steps(ctx)
				})
			}()
			<-started
			sigterm()
			err := <-done
			assert.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, upgrade.ErrUpgradeFailed)
			assert.ErrorContains(t, err, "still in progress")
			assert.Equal(t, upgrade.PhaseRunningSteps, g.Phase(), "not failed")
			assert.NoError(t, g.Cause())
			resp := serve(upgrade.Middleware(g, nil)(&served{}), "GET", "/")
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "clients keep waiting")
		})
	}
}

func TestRunStepsWithAnEndedCtxChangesNothing(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := g.RunSteps(ctx, func(context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran)
	assert.Equal(t, upgrade.PhaseChecking, g.Phase())
	assert.ErrorIs(t, g.RunSteps(context.Background(), nil), jujuerrors.NotValid)
}

func TestRunStepsStartsANewEpochAfterAFailure(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.Error(t, g.RunSteps(context.Background(), func(context.Context) error { return errors.New("first") }))
	require.NoError(t, g.RunSteps(context.Background(), func(context.Context) error { return nil }))
	assert.Equal(t, uint64(2), g.Report().Epoch)
	assert.Equal(t, upgrade.PhaseComplete, g.Phase())
}

// The board follows a real upgrade gate: its phase while locked and its
// cause once failed reach the readyz answers, with no state copied by
// hand (the incident: "[-]upgrade failed: its failed channel is closed").
func TestBoardFollowsAnUpgradeGate(t *testing.T) {
	var _ gate.Component = (*upgrade.Gate)(nil)
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	entry := b.Follow("upgrade", g)
	srv := newServer(t, boardview.ReadyHandler(b))
	get := func(accept string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/readyz?verbose", nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, body := get("")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "[-]upgrade locked for 0s (checking whether new agent binaries are needed)\nreadyz check failed\n", body)

	release, started := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.RunSteps(context.Background(), func(context.Context) error {
			close(started)
			<-release
			return errors.New("disk full")
		})
	}()
	<-started
	clk.Advance(3 * time.Second)
	_, body = get("")
	assert.Equal(t, "[-]upgrade locked for 3s (running upgrade steps)\nreadyz check failed\n", body)
	_, body = get("application/json")
	assert.Contains(t, body, `"detail":"running upgrade steps"`)

	close(release)
	require.Error(t, <-done)
	<-entry.Done()
	code, body = get("")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "[-]upgrade failed: upgrade steps: disk full\nreadyz check failed\n", body)
	_, body = get("application/json")
	assert.Contains(t, body, `"error":"upgrade steps: disk full"`)
}

// A report made the moment RunSteps returns shows the failure, its cause
// and its place in the order, not "locked for 0s" until the board's
// goroutine for the entry has run (the incident: /readyz?verbose said
// "[-]upgrade locked for 0s" right after "upgrade steps: disk full"). The
// loop makes a lost race near certain without the fix.
func TestBoardReportsAnUpgradeFailureAtOnce(t *testing.T) {
	for range 200 {
		g := upgrade.NewGate(upgrade.GateConfig{})
		b := gate.NewBoard(gate.BoardConfig{})
		b.Follow("upgrade", g)
		require.Error(t, g.RunSteps(context.Background(), func(context.Context) error { return errors.New("disk full") }))
		r := b.Report()
		require.Equal(t, gate.StateFailed, r[0].State, "%v", r)
		assert.EqualError(t, r[0].Err, `gate "upgrade" failed: upgrade steps: disk full`)
		assert.Equal(t, 1, r[0].Order)
		assert.Empty(t, r[0].Detail)
		assert.Equal(t, "failed", b.Timeline().Entries[0].State.String())
	}
}

func TestBoardFollowsAnUpgradeThatCompletes(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	b := gate.NewBoard(gate.BoardConfig{})
	entry := b.Follow("upgrade", g)
	require.NoError(t, g.RunSteps(context.Background(), func(context.Context) error { return nil }))
	<-entry.Unlocked()
	rec := httptest.NewRecorder()
	boardview.ReadyHandler(b).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, "ok", rec.Body.String())
}
