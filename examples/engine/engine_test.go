package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) log(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *logRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

func (r *logRecorder) index(t *testing.T, line string) int {
	t.Helper()
	lines := r.snapshot()
	i := slices.Index(lines, line)
	require.GreaterOrEqual(t, i, 0, "no log line %q in\n%v", line, lines)
	return i
}

const timeout = 10 * time.Second // a bound against hangs only

func TestAPIServerStartsOnlyAfterUpgradeStepsViaBounce(t *testing.T) {
	stepsDone := make(chan error)
	serving := make(chan struct{})
	rec := &logRecorder{}
	e := NewEngine(testclock.NewClock(time.Time{}), Manifolds(
		func(ctx context.Context) error { return <-stepsDone },
		func(ctx context.Context) error { close(serving); <-ctx.Done(); return nil },
	), time.Second, rec.log)
	go e.Run()

	stepsDone <- nil // the runner has started: it is blocked in its steps until now
	select {
	case <-serving:
	case <-time.After(timeout):
		e.Stop()
		t.Fatalf("api-server never started; log:\n%v", rec.snapshot())
	}
	e.Stop() // the engine has logged everything once it has stopped
	notYet := rec.index(t, "api-server: not started: upgrade steps not done: dependency not available")
	bounced := rec.index(t, "upgrade-steps-flag: bounced (gate unlocked: restart to see the new value)")
	started := rec.index(t, "api-server: started")
	assert.Less(t, notYet, bounced)
	assert.Less(t, bounced, started, "the api-server starts on the restarted flag")
}

func TestFailedUpgradeStepsRestartAfterDelayAndKeepAPIServerDown(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	attempts := make(chan chan error)
	serving := make(chan struct{})
	rec := &logRecorder{}
	e := NewEngine(clk, Manifolds(
		func(ctx context.Context) error {
			result := make(chan error)
			attempts <- result
			return <-result
		},
		func(ctx context.Context) error { close(serving); <-ctx.Done(); return nil },
	), time.Second, rec.log)
	go e.Run()
	defer e.Stop()

	(<-attempts) <- errors.New("schema migration failed")
	require.NoError(t, clk.WaitAdvance(time.Second, timeout, 1))
	select {
	case <-serving:
		t.Fatal("api-server started although the upgrade steps failed")
	case second := <-attempts:
		rec.index(t, "upgrade-steps-runner: failed: schema migration failed; restarting in 1s")
		second <- nil
	case <-time.After(timeout):
		t.Fatal("the runner was not restarted")
	}
	select {
	case <-serving:
	case <-time.After(timeout):
		t.Fatalf("api-server never started; log:\n%v", rec.snapshot())
	}
}
