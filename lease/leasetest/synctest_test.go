package leasetest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// These tests run trackers inside a testing/synctest bubble with their
// default clock (clock.WallClock): time.Now, timers and sleeps are the
// bubble's fake time, which moves only when every goroutine in it waits.
// An hour of renewals takes milliseconds, with no testclock and no
// Settle; a history.Recorder judges what the trackers said.

// run is what a bubble test observes: trackers, each checked every Poll,
// followed through Current, and leading (a Lead function that writes
// through guard every Poll), everything recorded in rec.
type run struct {
	t      *testing.T
	rec    history.Recorder
	guard  lease.TokenGuard
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	nodes  map[string]*lease.Tracker

	mu     sync.Mutex // guards runs and states
	runs   map[string]int
	states map[string]map[lease.State]int // checks' answers
}

const poll = time.Second

func newRun(t *testing.T) *run {
	ctx, cancel := context.WithCancel(context.Background())
	return &run{t: t, ctx: ctx, cancel: cancel, nodes: make(map[string]*lease.Tracker),
		runs: make(map[string]int), states: make(map[string]map[lease.State]int)}
}

// start makes a tracker for node on store and observes it.
func (r *run) start(node string, store leasestore.Store, cfg lease.Config) *lease.Tracker {
	cfg.Store, cfg.Name, cfg.Holder = store, "l", node
	tr, err := lease.NewTracker(cfg)
	require.NoError(r.t, err)
	r.nodes[node] = tr
	r.wg.Go(func() { r.check(node, tr) })
	r.wg.Go(func() { r.follow(node, tr) })
	r.wg.Go(func() { r.lead(node, tr) })
	return tr
}

func (r *run) check(node string, tr *lease.Tracker) {
	for {
		asked := time.Now()
		st, err := tr.Check(r.ctx, 0)
		if r.ctx.Err() != nil {
			return // cut by the end of the run: says nothing
		}
		r.rec.Record(history.Answer{Node: node, Call: history.CallCheck, Status: st, Err: err,
			Asked: asked, Returned: time.Now()})
		r.mu.Lock()
		if r.states[node] == nil {
			r.states[node] = make(map[lease.State]int)
		}
		r.states[node][st.State]++
		r.mu.Unlock()
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(poll):
		}
	}
}

func (r *run) follow(node string, tr *lease.Tracker) {
	for {
		st, changed := tr.Current()
		r.rec.Record(history.Answer{Node: node, Call: history.CallCurrent, Status: st, Returned: time.Now()})
		select {
		case <-r.ctx.Done():
			return
		case <-changed:
		}
	}
}

func (r *run) lead(node string, tr *lease.Tracker) {
	err := tr.Lead(r.ctx, func(ctx context.Context, st lease.Status) error {
		start := time.Now()
		r.mu.Lock()
		r.runs[node]++
		r.mu.Unlock()
		defer func() {
			r.rec.Record(history.Answer{Node: node, Call: history.CallLead, Status: st, Err: context.Cause(ctx),
				Asked: start, Returned: time.Now()})
		}()
		for {
			sent := time.Now()
			err := r.guard.Admit(st.Token)
			r.rec.Record(history.Answer{Node: node, Call: history.CallWrite, Status: lease.Status{Token: st.Token},
				Err: err, Asked: sent, Returned: time.Now()})
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(poll):
			}
		}
	})
	if !errors.Is(err, context.Canceled) && !errors.Is(err, lease.ErrClosed) {
		r.t.Errorf("%s: Lead: %v", node, err)
	}
}

// stepDown steps node down, recorded.
func (r *run) stepDown(node string) {
	asked := time.Now()
	err := r.nodes[node].StepDown(context.Background())
	r.rec.Record(history.Answer{Node: node, Call: history.CallStepDown, Err: err, Asked: asked, Returned: time.Now()})
	require.NoError(r.t, err)
}

// stop ends the observation, closes the trackers and returns the
// violations of the history.
func (r *run) stop() []history.Violation {
	r.cancel()
	r.wg.Wait()
	for _, tr := range r.nodes {
		require.NoError(r.t, tr.Close())
	}
	return r.rec.Verify()
}

func (r *run) answered(node string, s lease.State) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[node][s]
}

func (r *run) leadRuns(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[node]
}

// awaitHeld waits, in fake time, until tr's status is Held.
func awaitHeld(tr *lease.Tracker) lease.Status {
	for {
		st, changed := tr.Current()
		if st.State == lease.Held {
			return st
		}
		<-changed
	}
}

// A tracker on a MemStore, both with their default clocks, renews for an
// hour and hands over to another in fake time; the history is safe.
func TestSyncTestHourOfRenewalsAndAHandOver(t *testing.T) {
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		cfg := lease.Config{Duration: 10 * time.Second}
		store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		r := newRun(t)
		a := r.start("a", store, cfg)
		first := awaitHeld(a)
		r.start("b", store, cfg)

		time.Sleep(time.Hour)
		ra := a.Report()
		assert.Equal(t, lease.Held, ra.State)
		assert.Equal(t, first.Token, ra.Token, "one term all hour")
		// Renewed half-way through each validity (2×Duration − Margin,
		// less up to 10% jitter): an hour is at least 3600s/9.5s of them.
		assert.GreaterOrEqual(t, ra.Calls.Extend.OK, uint64(time.Hour/(19*time.Second/2)))

		handOver := time.Now()
		r.stepDown("a")
		st := awaitHeld(r.nodes["b"])
		took := time.Since(handOver)
		assert.Greater(t, st.Token, first.Token)
		// a released at once; b claims every ClaimInterval (Duration/10).
		assert.LessOrEqual(t, took, cfg.Duration/10)
		time.Sleep(10 * time.Minute)

		vs := r.stop()
		assert.Empty(t, vs)
		assert.Equal(t, 1, r.leadRuns("a"))
		assert.Equal(t, 1, r.leadRuns("b"))
		assert.Equal(t, time.Hour+10*time.Minute+took, time.Since(start), "fake time moved only as the test slept")
		t.Logf("%v of fake time: %d renewals, hand-over in %v", time.Since(start), ra.Calls.Extend.OK, took)
	})
	t.Logf("in %v of real time", time.Since(began))
}

// A FaultStore in a bubble, on its default clock: latency on every call,
// then an outage of the holder's renewals. The holder drops to Unknown at
// its promise's end, the other takes over after it, the holder learns
// it is not the leader once the store answers again — all safe.
func TestSyncTestFaultStoreOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := lease.Config{Duration: 10 * time.Second}
		fs := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{}), leasetest.FaultStoreConfig{})
		fs.SetLatency(20*time.Millisecond, 30*time.Millisecond)
		r := newRun(t)
		a := r.start("a", fs, cfg)
		first := awaitHeld(a)
		b := r.start("b", fs, cfg)
		time.Sleep(10 * time.Minute)

		fs.Always(leasetest.OpExtend, leasetest.Timeout) // a cannot renew; b's claims pass
		st := awaitHeld(b)
		assert.Greater(t, st.Token, first.Token)
		fs.Always(leasetest.AnyOp, leasetest.Pass)
		time.Sleep(10 * time.Minute)

		ra := a.Report()
		assert.Equal(t, lease.NotHeld, ra.State, "a learnt that b holds the lease")
		assert.Equal(t, "b", ra.Holder)
		vs := r.stop()
		assert.Empty(t, vs)
		assert.Positive(t, r.answered("a", lease.Unknown), "a's checks said Unknown during the outage")
		assert.Positive(t, r.answered("a", lease.NotHeld))
	})
}

// The same observation judges a broken store: two trackers, each on a
// MemStore of its own (a store without quorum), are both promised the
// lease, and the history says so. Without this, a bubble test that
// passes could be one that checks nothing.
func TestSyncTestHistoryCatchesSplitBrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := lease.Config{Duration: 10 * time.Second}
		r := newRun(t)
		awaitHeld(r.start("a", leasestore.NewMemStore(leasestore.MemStoreConfig{}), cfg))
		awaitHeld(r.start("b", leasestore.NewMemStore(leasestore.MemStoreConfig{}), cfg))
		time.Sleep(time.Minute)
		rules := make(map[history.Rule]bool)
		for _, v := range r.stop() {
			rules[v.Rule] = true
		}
		assert.True(t, rules[history.Overlap], "two holders at once")
		assert.True(t, rules[history.TokenOrder], "token 1 promised to both")
	})
}

// In a bubble, synctest.Wait settles a tracker as Settle does on a
// testclock: when it returns, the tracker waits for its next timer, with
// no store call in flight.
func TestSyncTestWaitSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{}), leasetest.FaultStoreConfig{})
		fs.SetLatency(time.Second, time.Second)
		tr, err := lease.NewTracker(lease.Config{Store: fs, Name: "l", Holder: "a", Duration: 10 * time.Second})
		require.NoError(t, err)
		defer tr.Close()
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		r := tr.Report()
		assert.Equal(t, leasestore.Report{InFlight: 1}, r.Calls, "the claim waits for its latency")
		assert.Equal(t, 500*time.Millisecond, r.InCall)

		time.Sleep(1500 * time.Millisecond) // the rest of the claim's latency, both ways
		synctest.Wait()
		r = tr.Report()
		assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{OK: 1}}, r.Calls)
		assert.Equal(t, lease.Held, r.State)
		assert.Zero(t, r.InCall)
		assert.True(t, r.NextCall.After(time.Now()), "waits for its next renewal at %v", r.NextCall)
	})
}

// A FaultStore's Lost fault ends the holder's term in the store while the
// tracker's promise still stands — a store breaking its word, by design.
// The tracker says ErrNotLeader at once, and the history names that
// answer and the promise it broke.
func TestSyncTestHistoryNamesAnInjectedLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := lease.Config{Duration: 10 * time.Second}
		fs := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{}), leasetest.FaultStoreConfig{})
		r := newRun(t)
		a := r.start("a", fs, cfg)
		awaitHeld(a)
		time.Sleep(time.Minute)
		fs.Next(leasetest.OpExtend, leasetest.Lost)
		time.Sleep(time.Minute)
		var found []history.Violation
		for _, v := range r.stop() {
			if v.Rule == history.NotLeaderWhilePromised {
				found = append(found, v)
			}
		}
		require.Len(t, found, 1)
		v := found[0]
		assert.Equal(t, lease.Held, v.Earlier.Status.State)
		assert.ErrorIs(t, v.Later.Err, lease.ErrNotLeader)
		assert.True(t, v.Later.Returned.Before(v.Earlier.Status.Until), "%v", v)
		t.Log(v)
	})
}
