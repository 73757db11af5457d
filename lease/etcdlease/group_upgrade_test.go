package etcdlease_test

// An HA group's upgrade, run once, on real etcd (issue 35): three
// controllers, each a lease.Tracker on its own client and an upgrade.Gate
// with a Group on the store's step log. The leader is killed inside a step;
// its successor runs the steps it did not record, never beside it, and
// every live controller's gate opens.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/upgrade"
)

const (
	// groupLease is the lease whose holder runs the group's steps, and
	// whose step log they are recorded in.
	groupLease = "upgrade-leader"
	// groupTerm is the trackers' Duration: they claim for 2 s (etcd grants
	// whole seconds).
	groupTerm = time.Second
	// groupWait bounds every wait of the test: a SessionStore's crashed
	// term ends with its session, up to its TTL (6 s) after the crash.
	groupWait = 30 * time.Second
)

// The group's steps, in order; groupMidStep is the one the leader dies in.
var groupSteps = []string{"4.0.1/schema-7", "4.0.1/reindex", "4.0.1/settings", "4.0.1/charm-urls"}

const groupMidStep = 1

// groupRun is one run of a step: the controller that ran it, the token it
// ran under, when it began and returned, and when its ctx ended if that
// came first (zero if not).
type groupRun struct {
	ctrl, step        string
	token             uint64
	begin, end, ended time.Time
	err               error
}

// heldUntil is when r stopped running while promised: its end, or the end
// of the promise of its token if that came first (promised, where known).
func (r groupRun) heldUntil(promised map[uint64]time.Time) time.Time {
	if until, ok := promised[r.token]; ok && until.Before(r.end) {
		return until
	}
	return r.end
}

// groupRuns records every step run of every controller.
type groupRuns struct {
	mu   sync.Mutex
	runs []groupRun
}

// wrap records each run of step s by controller ctrl.
func (r *groupRuns) wrap(ctrl string, s upgrade.Step) upgrade.Step {
	return upgrade.Step{Name: s.Name, Run: func(ctx context.Context, token uint64) error {
		run := groupRun{ctrl: ctrl, step: s.Name, token: token, begin: time.Now()}
		ctxEnded := make(chan time.Time, 1)
		stop := context.AfterFunc(ctx, func() { ctxEnded <- time.Now() })
		run.err = s.Run(ctx, token)
		run.end = time.Now()
		if !stop() { // ctx ended while the step ran
			run.ended = <-ctxEnded
		}
		r.mu.Lock()
		r.runs = append(r.runs, run)
		r.mu.Unlock()
		return run.err
	}}
}

// all returns the runs in the order they began.
func (r *groupRuns) all() []groupRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := slices.Clone(r.runs)
	slices.SortFunc(runs, func(a, b groupRun) int { return a.begin.Compare(b.begin) })
	return runs
}

// describeRuns lists runs for a failure message, their times from t0.
func describeRuns(runs []groupRun, promised map[uint64]time.Time, t0 time.Time) string {
	var b strings.Builder
	for _, r := range runs {
		ended := "did not end"
		if !r.ended.IsZero() {
			ended = "ended at " + r.ended.Sub(t0).String()
		}
		fmt.Fprintf(&b, "\n%s by %s under token %d: %v to %v (promised to %v, ctx %s): %v", r.step, r.ctrl, r.token,
			r.begin.Sub(t0), r.end.Sub(t0), r.heldUntil(promised).Sub(t0), ended, r.err)
	}
	return b.String()
}

// groupResource is what the steps write, outside etcd: each write is
// admitted by a lease.TokenGuard in the same critical section, so that a
// deposed leader's write is refused.
type groupResource struct {
	mu     sync.Mutex
	guard  lease.TokenGuard
	writes []string // step@token, in order
}

func (r *groupResource) write(step string, token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.guard.Admit(token); err != nil {
		return err
	}
	r.writes = append(r.writes, fmt.Sprintf("%s@%d", step, token))
	return nil
}

func (r *groupResource) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// groupCrash is what happens in the step the leader dies in. Its first run
// writes, says it is inside the step (entered), and waits for its ctx to
// end: the killed leader's promise running out, which it reports (ended).
// Then, as a process that comes back late would, it waits until a
// successor has written the step and writes again under its own token: the
// guard's answer is reported (late).
type groupCrash struct {
	taken     atomic.Bool
	entered   chan uint64   // the first run's token
	ended     chan error    // context.Cause of the first run's ctx
	late      chan error    // the guard's answer to the first run's late write
	rewritten chan struct{} // closed once a later run has written the step
	once      sync.Once
	quit      <-chan struct{} // the test's end
}

func newGroupCrash(quit <-chan struct{}) *groupCrash {
	return &groupCrash{
		entered: make(chan uint64, 1), ended: make(chan error, 1), late: make(chan error, 1),
		rewritten: make(chan struct{}), quit: quit,
	}
}

// steps returns the group's steps as one controller runs them; every
// controller's are the same, and write res under their token.
func (c *groupCrash) steps(ctrl string, runs *groupRuns, res *groupResource) []upgrade.Step {
	steps := make([]upgrade.Step, len(groupSteps))
	for i, name := range groupSteps {
		run := func(ctx context.Context, token uint64) error { return res.write(name, token) }
		if i == groupMidStep {
			run = func(ctx context.Context, token uint64) error {
				if err := res.write(name, token); err != nil {
					return err
				}
				if !c.taken.CompareAndSwap(false, true) {
					c.once.Do(func() { close(c.rewritten) })
					return nil
				}
				c.entered <- token
				select {
				case <-ctx.Done():
				case <-c.quit:
					return fmt.Errorf("the test ended before the leader's ctx did")
				}
				c.ended <- context.Cause(ctx)
				select {
				case <-c.rewritten:
					c.late <- res.write(name, token)
				case <-c.quit:
				}
				return ctx.Err()
			}
		}
		steps[i] = runs.wrap(ctrl, upgrade.Step{Name: name, Run: run})
	}
	return steps
}

// groupController is one controller's process: a tracker on its own
// client, whose Lead function runs the group's steps, and a gate whose
// Group waits for them.
type groupController struct {
	holder string
	tr     *lease.Tracker
	gate   *upgrade.Gate
	log    upgrade.StepLog
	stop   context.CancelFunc

	led, waited     chan struct{} // closed when Lead, Wait return
	ledErr, waitErr error
	killOnce        sync.Once
}

// startGroupController starts a controller named holder on cli; release
// says whether its tracker releases the lease on Close (a crashed one does
// not).
func startGroupController(t *testing.T, kind storeKind, cli *clientv3.Client, prefix, holder string, release bool, steps []upgrade.Step) *groupController {
	t.Helper()
	store := kind.make(t, cli, prefix, 2*groupTerm)
	log, ok := store.(upgrade.StepLog)
	require.True(t, ok, "%T is a StepLog", store)
	tr := newTracker(t, lease.Config{Store: store, Name: groupLease, Holder: holder, Duration: groupTerm,
		Margin: slowTimer, ReleaseOnClose: release})
	gate := upgrade.NewGate(upgrade.GateConfig{})
	grp, err := gate.Group(upgrade.GroupConfig{Log: log, Lease: groupLease, Steps: steps, Poll: 100 * time.Millisecond,
		Leader: func() string { st, _ := tr.Current(); return st.Holder }})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	c := &groupController{holder: holder, tr: tr, gate: gate, log: log, stop: stop,
		led: make(chan struct{}), waited: make(chan struct{})}
	go func() {
		defer close(c.led)
		c.ledErr = tr.Lead(ctx, func(ctx context.Context, st lease.Status) error { return grp.Lead(ctx, st.Token) })
	}()
	go func() {
		defer close(c.waited)
		c.waitErr = grp.Wait(ctx)
	}()
	t.Cleanup(c.kill) // before the tracker's Close and the store's: cleanups run last-in first-out
	return c
}

// kill ends the controller's process: its Lead and Wait stop, its tracker
// closes.
func (c *groupController) kill() {
	c.killOnce.Do(func() {
		c.stop()
		<-c.led
		<-c.waited
		c.tr.Close()
	})
}

// awaitOpen waits until the controller's gate opens and its Wait returns.
func (c *groupController) awaitOpen(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-c.gate.Completed():
	case <-ctx.Done():
		t.Fatalf("%s's gate did not open (%v): %s", c.holder, c.gate.Phase(), c.gate.Detail())
	}
	select {
	case <-c.waited:
	case <-ctx.Done():
		t.Fatalf("%s's Wait did not return", c.holder)
	}
	require.NoError(t, c.waitErr, c.holder)
	require.Equal(t, upgrade.PhaseComplete, c.gate.Phase(), c.holder)
}

// followPromise follows tr's promise of the term token and sends the
// latest Until it promised once it is over (tr no longer says Held with
// token, or that Until has passed).
func followPromise(ctx context.Context, tr *lease.Tracker, token uint64) <-chan time.Time {
	over := make(chan time.Time, 1)
	go func() {
		var until time.Time
		for {
			st, changed := tr.Current()
			if st.State != lease.Held || st.Token != token || !time.Now().Before(st.Until) {
				over <- until
				return
			}
			until = st.Until
			alarm := time.NewTimer(time.Until(st.Until))
			select {
			case <-changed:
			case <-alarm.C:
			case <-ctx.Done():
				alarm.Stop()
				over <- until
				return
			}
			alarm.Stop()
		}
	}()
	return over
}

func receive[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("no %s within %v", what, groupWait)
		panic("unreachable")
	}
}

// The leader of an HA group's upgrade is killed in the middle of step 2:
// its connection to etcd is cut, as a crash cuts it, so it cannot release,
// and its Lead function's ctx ends when its promise does. After the term
// runs out a successor (a survivor, or the killed controller's process
// started again under the same name) takes over and runs steps 2–4, not
// step 1; no two steps under different tokens ever ran at once while both
// were promised; each step is recorded once; the killed leader's late write
// is refused by the guard, its late record by the store; and the gates of
// the two survivors and of the restarted process all open.
func TestGroupUpgradeLeaderKilledMidSteps(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testGroupUpgradeLeaderKilledMidSteps)
}

func testGroupUpgradeLeaderKilledMidSteps(t *testing.T, kind storeKind) {
	m := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), groupWait)
	defer cancel()
	prefix := "/group/" + kind.name + "/"
	runs, res := &groupRuns{}, &groupResource{}
	crash := newGroupCrash(ctx.Done())

	// controller-0 leads first, through the link the test cuts.
	link := m.Link()
	c0 := startGroupController(t, kind, newClient(t, link.Endpoints()...), prefix, "controller-0", false,
		crash.steps("controller-0", runs, res))
	held := nextStatus(t, c0.tr, 10*time.Second, isHeld, nil, "controller-0 to lead")
	c1 := startGroupController(t, kind, newClient(t, m.Endpoints()...), prefix, "controller-1", true,
		crash.steps("controller-1", runs, res))
	c2 := startGroupController(t, kind, newClient(t, m.Endpoints()...), prefix, "controller-2", true,
		crash.steps("controller-2", runs, res))

	first := receive(t, ctx, crash.entered, "leader inside step 2")
	require.Equal(t, held.Token, first, "the first leader runs the steps under its token")
	leading := fmt.Sprintf("running step 2/4 (4.0.1/reindex) as the leader (token %d)", first)
	require.Eventually(t, func() bool { return c0.gate.Detail() == leading }, 10*time.Second, 10*time.Millisecond,
		"controller-0's gate says %q", leading) // once its Wait has begun
	for _, c := range []*groupController{c1, c2} {
		nextStatus(t, c.tr, 10*time.Second, func(st lease.Status) bool { return st.State == lease.NotHeld && st.Holder == "controller-0" },
			isHeld, c.holder+" to learn controller-0 leads")
		want := "waiting for controller-0 to finish step 2/4 (4.0.1/reindex)"
		require.Eventually(t, func() bool { return c.gate.Detail() == want }, 10*time.Second, 10*time.Millisecond,
			"%s's gate says %q", c.holder, want)
	}

	// The crash: controller-0 can no longer reach etcd, and its process
	// starts again, on a client of its own, under the same name.
	promised := followPromise(ctx, c0.tr, first)
	cut := time.Now()
	link.Refuse()
	c0b := startGroupController(t, kind, newClient(t, m.Endpoints()...), prefix, "controller-0", true,
		crash.steps("controller-0 (restarted)", runs, res))

	cause := receive(t, ctx, crash.ended, "end of the killed leader's ctx")
	require.ErrorIs(t, cause, lease.ErrRenewalFailed, "the killed leader's ctx ends when its promise does")
	until := receive(t, ctx, promised, "end of the killed leader's promise")
	require.False(t, until.IsZero())
	late := receive(t, ctx, crash.late, "the killed leader's late write")
	require.ErrorIs(t, late, lease.ErrStaleToken, "the deposed leader's write is refused")
	c0.kill()
	require.ErrorIs(t, c0.waitErr, context.Canceled)
	require.Equal(t, upgrade.PhaseRunningSteps, c0.gate.Phase(), "the killed process's upgrade was stopped, not failed")

	for _, c := range []*groupController{c1, c2, c0b} {
		c.awaitOpen(t, ctx)
	}

	// Each step is recorded once, in order; the killed leader's late
	// record is refused by its token and changes nothing.
	done, err := c1.log.StepsDone(ctx, groupLease)
	require.NoError(t, err)
	require.Equal(t, groupSteps, done)
	err = c1.log.RecordStep(ctx, groupLease, first, groupSteps[groupMidStep])
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "the killed leader's record")
	err = c1.log.RecordStep(ctx, groupLease, first, "4.0.1/late")
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "the killed leader's record")
	done, err = c2.log.StepsDone(ctx, groupLease)
	require.NoError(t, err)
	require.Equal(t, groupSteps, done)

	// The successor ran the steps the killed leader did not record, and
	// only those, under one later token.
	all := runs.all()
	promises := map[uint64]time.Time{first: until}
	var next uint64
	var successor string
	byStep := map[string][]uint64{}
	for _, r := range all {
		byStep[r.step] = append(byStep[r.step], r.token)
		if r.token != first && next == 0 {
			next, successor = r.token, r.ctrl
		}
	}
	require.Greater(t, next, first, "the successor's token")
	require.Equal(t, map[string][]uint64{
		groupSteps[0]: {first}, groupSteps[1]: {first, next}, groupSteps[2]: {next}, groupSteps[3]: {next},
	}, byStep, "runs, from the cut:%s", describeRuns(all, promises, cut))
	require.Equal(t, []string{
		fmt.Sprintf("%s@%d", groupSteps[0], first), fmt.Sprintf("%s@%d", groupSteps[1], first),
		fmt.Sprintf("%s@%d", groupSteps[1], next), fmt.Sprintf("%s@%d", groupSteps[2], next),
		fmt.Sprintf("%s@%d", groupSteps[3], next),
	}, res.all(), "the writes admitted")

	// None ran beside another: no two runs under different tokens overlap
	// while both were promised (the killed leader's run, which outlived its
	// promise, up to the promise's end), and the successor began after the
	// killed leader's promise ended.
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.token != b.token {
				require.True(t, a.heldUntil(promises).Before(b.begin) || b.heldUntil(promises).Before(a.begin),
					"two runs overlap, from the cut:%s", describeRuns([]groupRun{a, b}, promises, cut))
			}
		}
	}
	var takeover, lastEnd time.Time
	for _, r := range all {
		if r.token == next && (takeover.IsZero() || r.begin.Before(takeover)) {
			takeover = r.begin
		}
		if r.token == next && r.end.After(lastEnd) {
			lastEnd = r.end
		}
	}
	require.True(t, takeover.After(until), "the successor began at %v, before the killed leader's promise ended (%v)", takeover, until)
	var rerun []string
	for _, name := range groupSteps {
		if n := len(byStep[name]); n > 1 {
			rerun = append(rerun, fmt.Sprintf("%s ×%d", name, n))
		}
	}
	var killed groupRun
	for _, r := range all {
		if r.token == first && r.step == groupSteps[groupMidStep] {
			killed = r
		}
	}
	require.ErrorIs(t, killed.err, context.Canceled, "the killed run stopped on its ctx")
	require.False(t, killed.ended.IsZero(), "the killed run's ctx ended while it ran")
	require.False(t, killed.ended.Before(until), "the killed leader's ctx ended %v before its promise did",
		until.Sub(killed.ended))
	t.Logf("%s took over (token %d after %d): %v after the cut, %v after the killed leader's promise ended "+
		"(its ctx ended %v after the promise); steps re-run: %d (%s); the successor's steps took %v",
		successor, next, first, takeover.Sub(cut).Round(time.Millisecond), takeover.Sub(until).Round(time.Millisecond),
		killed.ended.Sub(until).Round(time.Microsecond), len(all)-len(groupSteps), strings.Join(rerun, ", "),
		lastEnd.Sub(takeover).Round(time.Millisecond))
}
