package upgrade_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/upgrade"
)

const groupLease = "upgrade-leader"

// stepRuns records which token each step ran under, and fails the test if
// two steps ever run at once.
type stepRuns struct {
	t        *testing.T
	inFlight atomic.Int32
	mu       sync.Mutex
	runs     map[string][]uint64
}

func newStepRuns(t *testing.T) *stepRuns { return &stepRuns{t: t, runs: map[string][]uint64{}} }

// step is a step named name; body, if not nil, is what it does.
func (r *stepRuns) step(name string, body func(ctx context.Context, token uint64) error) upgrade.Step {
	return upgrade.Step{Name: name, Run: func(ctx context.Context, token uint64) error {
		if r.inFlight.Add(1) > 1 {
			r.t.Errorf("step %s (token %d) ran beside another step", name, token)
		}
		defer r.inFlight.Add(-1)
		r.mu.Lock()
		r.runs[name] = append(r.runs[name], token)
		r.mu.Unlock()
		if body != nil {
			return body(ctx, token)
		}
		return nil
	}}
}

func (r *stepRuns) tokens() map[string][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]uint64{}
	for k, v := range r.runs {
		out[k] = append([]uint64(nil), v...)
	}
	return out
}

// member is one controller of the group: its gate, its Group, and its
// Wait running.
type member struct {
	g      *upgrade.Gate
	grp    *upgrade.Group
	waited chan error
	stop   context.CancelFunc
}

func startMember(t *testing.T, clk *testclock.Clock, store *leasestore.MemStore, steps []upgrade.Step) *member {
	t.Helper()
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	grp, err := g.Group(upgrade.GroupConfig{Log: store, Lease: groupLease, Steps: steps, Leader: func() string {
		h, err := store.Holder(context.Background(), groupLease)
		if err != nil {
			return ""
		}
		return h.Holder
	}})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	m := &member{g: g, grp: grp, waited: make(chan error, 1), stop: stop}
	go func() { m.waited <- grp.Wait(ctx) }()
	t.Cleanup(func() {
		stop()
		<-m.waited
	})
	return m
}

func (m *member) waitErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-m.waited:
		m.waited <- err // for Cleanup
		return err
	case <-time.After(waitTimeout):
		t.Fatal("Wait did not return")
		return nil
	}
}

func claim(t *testing.T, store *leasestore.MemStore, holder string) uint64 {
	t.Helper()
	g, err := store.Claim(context.Background(), groupLease, holder, time.Minute)
	require.NoError(t, err)
	return g.Token
}

// Three controllers, one upgrade: the holder runs each step once, and
// every gate opens on the recorded steps.
func TestGroupRunsEachStepOnce(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	r := newStepRuns(t)
	steps := []upgrade.Step{r.step("a", nil), r.step("b", nil), r.step("c", nil)}
	ms := []*member{startMember(t, clk, store, steps), startMember(t, clk, store, steps), startMember(t, clk, store, steps)}
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 3)) // every Wait has read the log once
	assert.Equal(t, "waiting for the leader to finish step 1/3 (a)", ms[1].g.Detail())

	token := claim(t, store, "controller-0")
	assert.Equal(t, "waiting for controller-0 to finish step 1/3 (a)", ms[1].g.Detail())
	require.NoError(t, ms[0].grp.Lead(context.Background(), token))
	require.NoError(t, ms[0].waitErr(t), "the leader's gate opens on its own records, without a poll")
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 2))
	for i, m := range ms {
		require.NoError(t, m.waitErr(t), "controller %d", i)
		assert.Equal(t, upgrade.PhaseComplete, m.g.Phase(), "controller %d", i)
	}
	require.NoError(t, ms[1].grp.Lead(context.Background(), claimAfter(t, clk, store, "controller-1")))
	assert.Equal(t, map[string][]uint64{"a": {token}, "b": {token}, "c": {token}}, r.tokens(),
		"each step ran once, a later leader ran none again")
}

// claimAfter lets the current term expire and claims the lease for holder.
func claimAfter(t *testing.T, clk *testclock.Clock, store *leasestore.MemStore, holder string) uint64 {
	t.Helper()
	clk.Advance(time.Minute)
	return claim(t, store, holder)
}

// The incident: a leader dies in the middle of step 2. Its successor runs
// step 2 again and step 3, never step 1, never beside it; every live gate
// opens.
func TestGroupSuccessorRunsTheUnfinishedSteps(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	r := newStepRuns(t)
	started := make(chan struct{})
	steps := []upgrade.Step{
		r.step("a", nil),
		r.step("b", func(ctx context.Context, token uint64) error {
			if token == 1 { // the first leader dies here
				close(started)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}),
		r.step("c", nil),
	}
	ms := []*member{startMember(t, clk, store, steps), startMember(t, clk, store, steps), startMember(t, clk, store, steps)}
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 3)) // every Wait has read the log once
	first := claim(t, store, "controller-0")
	require.Equal(t, uint64(1), first)
	ctx, die := context.WithCancel(context.Background())
	led := make(chan error, 1)
	go func() { led <- ms[0].grp.Lead(ctx, first) }()
	<-started
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 3)) // the others read step a done
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 3))
	assert.Equal(t, "running step 2/3 (b) as the leader (token 1)", ms[0].g.Detail())
	assert.Equal(t, "waiting for controller-0 to finish step 2/3 (b)", ms[2].g.Detail())

	die()
	ms[0].stop()
	assert.ErrorIs(t, <-led, context.Canceled)
	err := ms[0].waitErr(t)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "step 2/3 (b)")
	assert.Equal(t, upgrade.PhaseRunningSteps, ms[0].g.Phase(), "a stopped upgrade is not a failed one")

	next := claimAfter(t, clk, store, "controller-1")
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 2)) // the others have read the log since
	require.NoError(t, ms[1].grp.Lead(context.Background(), next))
	require.NoError(t, ms[1].waitErr(t))
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1))
	require.NoError(t, ms[2].waitErr(t))
	assert.Equal(t, map[string][]uint64{"a": {first}, "b": {first, next}, "c": {next}}, r.tokens())
}

// A leader deposed while it ran a step: its record is refused by the token,
// nothing is recorded, and its gate says so while it waits for the new one.
func TestGroupDeposedLeaderIsRefused(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	r := newStepRuns(t)
	var next uint64
	steps := []upgrade.Step{
		r.step("a", func(ctx context.Context, token uint64) error {
			if token == 1 { // a pause: the term ends and another takes the lease
				next = claimAfter(t, clk, store, "controller-1")
			}
			return nil
		}),
		r.step("b", nil),
	}
	ms := []*member{startMember(t, clk, store, steps), startMember(t, clk, store, steps)}
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 2)) // every Wait has read the log once
	err := ms[0].grp.Lead(context.Background(), claim(t, store, "controller-0"))
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	assert.ErrorContains(t, err, "step 1/2 (a) ran under token 1 but was not recorded")
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 2)) // both have read the log since the term ended
	done, rerr := store.StepsDone(context.Background(), groupLease)
	require.NoError(t, rerr)
	assert.Empty(t, done, "a deposed leader records nothing")
	assert.Equal(t, `deposed: step 1/2 (a) ran under token 1 but was not recorded: lease "upgrade-leader": term 1 is over: `+
		`record step "a": lease claimed again (token 2) (held by "controller-1" now); waiting for controller-1 to finish step 1/2 (a)`,
		ms[0].g.Detail())

	require.NoError(t, ms[1].grp.Lead(context.Background(), next))
	require.NoError(t, ms[1].waitErr(t))
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1))
	require.NoError(t, ms[0].waitErr(t), "the deposed leader's gate opens on its successor's steps")
	assert.Equal(t, map[string][]uint64{"a": {1, next}, "b": {next}}, r.tokens())
}

// A step's own failure fails its leader's gate, in the gate's words; a
// follower that gives up says what it waited for, its upgrade in progress.
func TestGroupFailureAndTimeoutSayWhatHappened(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	r := newStepRuns(t)
	diskFull := errors.New("disk full")
	steps := []upgrade.Step{r.step("schema-7", func(context.Context, uint64) error { return diskFull })}
	ms := []*member{startMember(t, clk, store, steps), startMember(t, clk, store, steps)}
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 2)) // every Wait has read the log once
	err := ms[0].grp.Lead(context.Background(), claim(t, store, "controller-0"))
	assert.ErrorIs(t, err, diskFull)
	assert.EqualError(t, err, "step 1/1 (schema-7): disk full")
	assert.EqualError(t, ms[0].waitErr(t), "upgrade steps: step 1/1 (schema-7): disk full")
	assert.Equal(t, upgrade.PhaseFailed, ms[0].g.Phase())

	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1))
	ms[1].stop()
	err = ms[1].waitErr(t)
	assert.ErrorIs(t, err, context.Canceled)
	assert.EqualError(t, err, "upgrade steps stopped, upgrade still in progress: waiting for controller-0 to finish step 1/1 (schema-7): context canceled")
	assert.Equal(t, upgrade.PhaseRunningSteps, ms[1].g.Phase())
}

// Remote clients are asked to come back when the steps left should be
// done: the time per step seen so far times the steps left.
func TestGroupSizesRetryAfterByTheStepsLeft(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	r := newStepRuns(t)
	steps := []upgrade.Step{r.step("a", nil), r.step("b", nil), r.step("c", nil), r.step("d", nil), r.step("e", nil)}
	token := claim(t, store, "controller-0")
	ctx := context.Background()
	require.NoError(t, store.RecordStep(ctx, groupLease, token, "a"))
	m := startMember(t, clk, store, steps)
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1))
	assert.Equal(t, upgrade.DefaultRetryAfter, hintOf(m.g), "no step seen done yet: R")

	require.NoError(t, store.RecordStep(ctx, groupLease, token, "b"))
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, 1)) // a step in 2 s
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1))
	assert.Equal(t, 6*time.Second, hintOf(m.g), "3 steps left, 2 s each")
	resp := serve(upgrade.Middleware(m.g, nil)(&served{}), "GET", "/")
	assert.Contains(t, []string{"6", "7", "8", "9", "10", "11", "12"}, resp.Header.Get("Retry-After"))

	for _, s := range []string{"c", "d", "e"} {
		require.NoError(t, store.RecordStep(ctx, groupLease, token, s))
	}
	require.NoError(t, clk.WaitAdvance(time.Second, waitTimeout, 1))
	require.NoError(t, m.waitErr(t))
	require.NoError(t, m.g.Enter(upgrade.PhaseChecking))
	assert.Equal(t, upgrade.DefaultRetryAfter, hintOf(m.g), "R is put back")
}

func hintOf(g *upgrade.Gate) time.Duration {
	var ip *upgrade.InProgressError
	if errors.As(g.Admit(false), &ip) {
		return ip.RetryAfter()
	}
	return -1
}

func TestGroupConfigIsChecked(t *testing.T) {
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	run := func(context.Context, uint64) error { return nil }
	ok := []upgrade.Step{{Name: "a", Run: run}}
	for _, tc := range []struct {
		cfg  upgrade.GroupConfig
		want string
	}{
		{upgrade.GroupConfig{Lease: "l", Steps: ok}, "nil Log (must be a StepLog) not valid"},
		{upgrade.GroupConfig{Log: store, Steps: ok}, "empty Lease (must name the lease whose holder runs the steps) not valid"},
		{upgrade.GroupConfig{Log: store, Lease: "l"}, "no Steps (must be at least one) not valid"},
		{upgrade.GroupConfig{Log: store, Lease: "l", Steps: ok, Poll: -1}, "Poll -1ns (must be positive, or zero for 1s) not valid"},
		{upgrade.GroupConfig{Log: store, Lease: "l", Steps: []upgrade.Step{{Run: run}}}, `Steps[0].Name "" (must be distinct and not empty) not valid`},
		{upgrade.GroupConfig{Log: store, Lease: "l", Steps: []upgrade.Step{ok[0], ok[0]}}, `Steps[1].Name "a" (must be distinct and not empty) not valid`},
		{upgrade.GroupConfig{Log: store, Lease: "l", Steps: []upgrade.Step{{Name: "a"}}}, "Steps[0].Run nil (must be the step's func) not valid"},
	} {
		_, err := upgrade.NewGate(upgrade.GateConfig{}).Group(tc.cfg)
		assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)
		assert.EqualError(t, err, tc.want)
	}
	grp, err := upgrade.NewGate(upgrade.GateConfig{}).Group(upgrade.GroupConfig{Log: store, Lease: "l", Steps: ok})
	require.NoError(t, err)
	assert.True(t, jujuerrors.Is(grp.Lead(context.Background(), 0), jujuerrors.NotValid))
}

var _ upgrade.StepLog = (*leasestore.MemStore)(nil)
