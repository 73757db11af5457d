package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// capture is a slog.Handler that keeps every record, its attributes
// flattened into a map.
type capture struct {
	mu      sync.Mutex
	records []record
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (r record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q", r.level, r.msg)
	for k, v := range r.attrs {
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	return b.String()
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler       { panic("capture: WithAttrs not used") }
func (c *capture) WithGroup(string) slog.Handler            { panic("capture: WithGroup not used") }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, rec)
	return nil
}

// take returns the records captured since the last take.
func (c *capture) take() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.records
	c.records = nil
	return out
}

// logged returns each record as "LEVEL message".
func logged(rs []record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.level.String() + " " + r.msg
	}
	return out
}

// newLoggedFixture is newFixture with a capturing Logger.
func newLoggedFixture(t *testing.T, mod func(*lease.Config), before func(*fixture)) (*fixture, *capture) {
	t.Helper()
	c := &capture{}
	f := newFixture(t, func(cfg *lease.Config) {
		cfg.Logger = slog.New(c)
		if mod != nil {
			mod(cfg)
		}
	}, before)
	return f, c
}

// stepUntil steps f's tracker until its state is s, and returns how many
// store calls that took.
func stepUntil(t *testing.T, f *fixture, s lease.State) int {
	t.Helper()
	for n := 1; n <= 50; n++ {
		if step(t, f).State == s {
			return n
		}
	}
	t.Fatalf("tracker never became %v", s)
	return 0
}

// TestLogOneRecordPerTransition drives a flapping run on a testclock: a
// claim, routine renewals, renewals timing out until the promise runs out,
// a recovery, a loss, a takeover and a new term. Each change gives exactly
// one record, with its keys; routine renewals and failed retries that
// change nothing give none.
func TestLogOneRecordPerTransition(t *testing.T) {
	f, c := newLoggedFixture(t, nil, nil)
	f.held(t)
	settle(t, f)
	recs := c.take()
	require.Equal(t, []string{"INFO lease held"}, logged(recs))
	r := recs[0]
	assert.Equal(t, "singular", r.attrs["lease"].String())
	assert.Equal(t, "held", r.attrs["state"].String())
	assert.Equal(t, "unit-0", r.attrs["holder"].String())
	assert.Equal(t, uint64(1), r.attrs["token"].Uint64())
	assert.Equal(t, t0.Add(until0), r.attrs["until"].Time())
	assert.Equal(t, time.Duration(0), r.attrs["latency"].Duration(), "the claim's latency")
	assert.NotContains(t, r.attrs, "err")

	for range 3 {
		step(t, f) // routine renewals
	}
	for range 100 {
		_, err := f.tr.Check(context.Background(), dur)
		require.NoError(t, err)
	}
	assert.Empty(t, logged(c.take()), "no record per routine renewal or per check")

	// AppliedTimeout: the store extends the term, the tracker cannot know.
	f.store.Always(leasetest.OpExtend, leasetest.AppliedTimeout)
	step(t, f)
	recs = c.take()
	require.Equal(t, []string{"WARN lease renewal not confirmed"}, logged(recs))
	held := f.tr.Report()
	assert.Equal(t, held.Until, recs[0].attrs["until"].Time(), "the promise that still stands")
	assert.ErrorIs(t, recs[0].attrs["err"].Any().(error), leasetest.ErrInjectedTimeout)
	assert.Contains(t, recs[0].attrs, "latency")
	retries := stepUntil(t, f, lease.Unknown)
	assert.Greater(t, retries, 2, "several retries failed while Held")
	step(t, f)
	step(t, f) // retries while Unknown
	recs = c.take()
	require.Equal(t, []string{"WARN lease state unknown"}, logged(recs), "one record for %d failed retries", retries+2)
	assert.Equal(t, "unknown", recs[0].attrs["state"].String())
	assert.Equal(t, uint64(1), recs[0].attrs["token"].Uint64())
	assert.NotContains(t, recs[0].attrs, "holder")

	f.store.Always(leasetest.OpExtend, leasetest.Pass)
	step(t, f)
	recs = c.take()
	require.Equal(t, []string{"INFO lease confirmed again"}, logged(recs))
	assert.Equal(t, uint64(1), recs[0].attrs["token"].Uint64(), "the same term")

	// A flap between Held and Held-unconfirmed logs each side once.
	f.store.Next(leasetest.OpExtend, leasetest.Timeout)
	step(t, f)
	step(t, f)
	assert.Equal(t, []string{"WARN lease renewal not confirmed", "INFO lease confirmed again"}, logged(c.take()))

	// The term is lost; another holder takes the lease; then it is free.
	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	step(t, f)
	recs = c.take()
	require.Equal(t, []string{"WARN lease lost"}, logged(recs))
	assert.Equal(t, uint64(1), recs[0].attrs["token"].Uint64(), "the term lost")
	assert.ErrorIs(t, recs[0].attrs["err"].Any().(error), lease.ErrNotLeader)
	assert.NotContains(t, recs[0].attrs, "until")
	other, err := f.mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
	require.NoError(t, err)
	step(t, f)
	step(t, f)
	step(t, f) // claims denied by the same holder
	recs = c.take()
	require.Equal(t, []string{"INFO lease held by another"}, logged(recs))
	assert.Equal(t, "unit-1", recs[0].attrs["holder"].String())
	assert.Equal(t, "not-held", recs[0].attrs["state"].String())
	require.NoError(t, f.mem.Revoke(context.Background(), other))
	stepUntil(t, f, lease.Held)
	recs = c.take()
	require.Equal(t, []string{"INFO lease held"}, logged(recs))
	assert.Equal(t, other.Token+1, recs[0].attrs["token"].Uint64(), "a new term")

	require.NoError(t, f.tr.Close())
	assert.Equal(t, []string{"INFO lease tracker closed"}, logged(c.take()))
}

// TestLogFirstClaimUnconfirmed: a first claim that times out is logged
// once as Unknown, with its cause, however often it is retried.
func TestLogFirstClaimUnconfirmed(t *testing.T) {
	f, c := newLoggedFixture(t, nil, func(f *fixture) { f.store.Always(leasetest.OpClaim, leasetest.Timeout) })
	settle(t, f)
	step(t, f)
	step(t, f)
	recs := c.take()
	require.Equal(t, []string{"WARN lease state unknown"}, logged(recs))
	assert.ErrorIs(t, recs[0].attrs["err"].Any().(error), leasetest.ErrInjectedTimeout)
	assert.NotContains(t, recs[0].attrs, "token")
}

// TestLogLeadStepDownAndRelease: a Lead run's start and end (with the
// cause), the step-down, and the release after the run ended, in order;
// then Close releasing a new term.
func TestLogLeadStepDownAndRelease(t *testing.T) {
	f, c := newLoggedFixture(t, func(cfg *lease.Config) { cfg.ReleaseOnClose = true }, nil)
	f.held(t)
	settle(t, f)
	l := startLead(t, f.tr)
	r := l.next(t)
	stepped := make(chan error, 1)
	go func() { stepped <- f.tr.StepDown(context.Background()) }()
	require.ErrorIs(t, r.ended(t), lease.ErrNotLeader)
	r.ret <- r.ctx.Err()
	require.NoError(t, <-stepped)
	recs := c.take()
	require.Equal(t, []string{
		"INFO lease held",
		"INFO lease leader run started",
		"INFO lease stepped down",
		"INFO lease leader run ended",
		"INFO lease released",
	}, logged(recs))
	assert.Equal(t, uint64(1), recs[1].attrs["token"].Uint64())
	assert.Equal(t, uint64(1), recs[2].attrs["token"].Uint64(), "the term stepped down from")
	assert.ErrorIs(t, recs[3].attrs["err"].Any().(error), lease.ErrNotLeader, "the run's cause")
	assert.Equal(t, uint64(1), recs[4].attrs["token"].Uint64())
	assert.Contains(t, recs[4].attrs, "latency")
	assert.NotContains(t, recs[4].attrs, "err")

	f.clk.Advance(dur) // the follower claims again after one Duration
	stepUntil(t, f, lease.Held)
	r = l.next(t) // Lead runs fn again
	go func() {
		<-r.ctx.Done()
		r.ret <- r.ctx.Err()
	}()
	assert.Equal(t, []string{"INFO lease held", "INFO lease leader run started"}, logged(c.take()))
	f.store.Next(leasetest.OpRevoke, leasetest.Timeout)
	require.Error(t, f.tr.Close())
	recs = c.take()
	require.Equal(t, []string{"INFO lease tracker closed", "INFO lease leader run ended", "WARN lease release not confirmed"},
		logged(recs), "the release waits for the run")
	assert.ErrorIs(t, recs[1].attrs["err"].Any().(error), lease.ErrClosed)
	assert.Equal(t, uint64(2), recs[2].attrs["token"].Uint64())
	assert.True(t, errors.Is(recs[2].attrs["err"].Any().(error), leasetest.ErrInjectedTimeout))
}

// TestNothingAfterClose: once Close has returned (a release made, a Lead
// function ended), the tracker writes no record, makes no store call and
// counts nothing, however the clock moves and whoever asks.
func TestNothingAfterClose(t *testing.T) {
	logs := logtest.New()
	f := newFixture(t, func(c *lease.Config) { c.Logger = logs.Logger(); c.ReleaseOnClose = true }, nil)
	f.held(t)
	step(t, f) // a renewal
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	led := make(chan error, 1)
	go func() {
		led <- f.tr.Lead(ctx, func(ctx context.Context, _ lease.Status) error { <-ctx.Done(); return nil })
	}()
	logs.WaitMessage(t, "lease leader run started", 1)
	require.NoError(t, f.tr.Close())
	logs.Seal(t)
	require.Len(t, logs.Matching("lease released"), 1)
	rep, calls := f.tr.Report(), f.store.StoreReport()

	require.ErrorIs(t, <-led, lease.ErrClosed)
	f.clk.Advance(10 * time.Minute)
	_, err := f.tr.Check(context.Background(), 0)
	require.ErrorIs(t, err, lease.ErrClosed)
	assert.Equal(t, rep.Calls, f.tr.Report().Calls, "no call counted after Close")
	assert.Equal(t, rep.Transitions, f.tr.Report().Transitions)
	assert.Equal(t, calls, f.store.StoreReport(), "no store call after Close")
}
