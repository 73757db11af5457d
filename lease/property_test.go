package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// TestPropertyNoOverlappingHeld drives many trackers contending for two
// leases in one MemStore through random store faults (timeouts, applied
// timeouts, hangs, denied claims, latency), random clock steps and
// restarts (with and without release), with the MemStore's loss signals
// and spurious ones, and checks that
//   - every outstanding Held promise (Check result or Changes status) is
//     backed by the store: until its Until, the store's live term for the
//     lease carries the promised token; and
//   - no two tracker instances ever report Held with overlapping validity
//     for the same lease.
//
// A promise ends when its tracker's Close begins (Close means "I stop
// acting as leader"; with ReleaseOnClose a successor may start at once).
// The scenario is seeded; goroutine interleavings vary from run to run.
func TestPropertyNoOverlappingHeld(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runProperty(t, seed, 600)
		})
	}
}

const propDur = 10 * time.Second

type promise struct {
	inst        *instance
	token       uint64
	from, until time.Time
}

type instance struct {
	id           int
	name, holder string
	store        *leasetest.FaultStore
	tr           *lease.Tracker
	closedAt     time.Time     // zero while open; written by the test goroutine only
	closed       chan struct{} // closed once Close has returned
}

type propertyRun struct {
	t     *testing.T
	clk   *testclock.Clock
	mem   *leasestore.MemStore
	rec   *recordingStore
	r     *rand.Rand
	slots []*instance
	ids   int // the last instance id

	ctx     context.Context // ends the checks still waiting at the end
	wg      sync.WaitGroup
	mu      sync.Mutex // guards the fields below
	held    []promise
	counts  map[string]int
	tokens  map[uint64]bool
	instMu  sync.Mutex
	closing map[*instance]time.Time
}

// propStep is one kind of random step: its weight in 100 of being chosen,
// and what it does to slot i.
type propStep struct {
	weight int
	name   string
	act    func(p *propertyRun, i int)
}

var (
	propAdvances = []time.Duration{10 * time.Millisecond, 300 * time.Millisecond, time.Second,
		2500 * time.Millisecond, 6 * time.Second, 15 * time.Second}
	propAtLeasts = []time.Duration{0, time.Second, 5 * time.Second, propDur, 2*propDur - propDur/10}
	propFaults   = []leasetest.Fault{leasetest.Pass, leasetest.Timeout, leasetest.AppliedTimeout, leasetest.Hang}
	propOps      = []leasetest.Op{leasetest.OpClaim, leasetest.OpExtend, leasetest.OpClaim | leasetest.OpExtend}
	// propLatencies are request and response latencies.
	propLatencies = [][2]time.Duration{{0, 0}, {300 * time.Millisecond, 300 * time.Millisecond},
		{0, 2 * time.Second}, {time.Second, time.Second}}
)

// propSteps are the steps of a run; their weights add up to 100.
var propSteps = []propStep{
	{35, "advance the clock", func(p *propertyRun, _ int) { p.clk.Advance(pick(p.r, propAdvances)) }},
	{20, "check", func(p *propertyRun, i int) { p.check(p.slots[i], pick(p.r, propAtLeasts)) }},
	{13, "standing fault", func(p *propertyRun, i int) {
		p.slots[i].store.Always(pick(p.r, propOps), pick(p.r, propFaults))
	}},
	{8, "next call fails", func(p *propertyRun, i int) {
		p.slots[i].store.Next(pick(p.r, propOps), pick(p.r, propFaults[1:])) // never Pass
	}},
	{8, "heal", func(p *propertyRun, i int) { heal(p.slots[i].store) }},
	{4, "latency", func(p *propertyRun, i int) {
		l := pick(p.r, propLatencies)
		p.slots[i].store.SetLatency(l[0], l[1])
	}},
	{4, "claim denied, holder unnamed", func(p *propertyRun, i int) {
		p.slots[i].store.Next(leasetest.OpClaim, leasetest.Lost)
	}},
	{3, "spurious loss signal", func(p *propertyRun, i int) { p.slots[i].store.SignalLost(p.slots[i].name) }},
	{5, "restart", func(p *propertyRun, i int) { p.close(p.slots[i]); p.slots[i] = p.start(i) }},
}

func pick[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

// choose returns the step that k in [0, 100) falls on.
func choose(k int) propStep {
	for _, s := range propSteps {
		if k < s.weight {
			return s
		}
		k -= s.weight
	}
	panic("propSteps weigh less than 100")
}

func heal(fs *leasetest.FaultStore) {
	fs.Always(leasetest.AnyOp, leasetest.Pass)
	fs.SetLatency(0, 0)
}

func runProperty(t *testing.T, seed uint64, steps int) {
	clk := testclock.NewClock(t0)
	defer drainAlarms(clk)()
	ctx, cancel := context.WithCancel(context.Background())
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	p := &propertyRun{
		rec: &recordingStore{Store: mem, clk: clk, ends: make(map[uint64]time.Time), revoked: make(map[uint64]bool)},
		t:   t, clk: clk, mem: mem, r: rand.New(rand.NewPCG(seed, 0x1ea5e)),
		ctx: ctx, counts: make(map[string]int), tokens: make(map[uint64]bool), closing: make(map[*instance]time.Time),
	}
	// Six slots on two leases; slots 0 and 4 (and 1 and 5) share both the
	// lease and the holder name, like a process and its restart.
	p.slots = make([]*instance, 6)
	for i := range p.slots {
		p.slots[i] = p.start(i)
	}
	taken := make(map[string]int)
	for range steps {
		i := p.r.IntN(len(p.slots))
		step := choose(p.r.IntN(100))
		taken[step.name]++
		step.act(p, i)
		p.settle()
		p.checkStoreBacksPromises()
	}
	p.closeAll()
	cancel()
	p.wg.Wait()
	p.checkNoOverlap()
	p.checkStoreOutlastsPromises()

	t.Logf("seed %d: steps %v; outcomes %v", seed, taken, p.counts)
	assert.Greater(t, p.counts["held"], 20, "the run must exercise leadership")
	assert.Positive(t, p.counts["renewal-failed-held"]+p.counts["renewal-failed-unknown"],
		"the run must exercise ambiguous failures")
	assert.Positive(t, p.counts["not-leader"], "the run must exercise contention")
	assert.Greater(t, p.counts["terms"], 4, "leadership must change hands")
}

// drainAlarms reads clk's alarm notifications (testclock panics when their
// buffer fills) until the returned stop is called.
func drainAlarms(clk *testclock.Clock) (stop func()) {
	done := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-clk.Alarms():
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-drained }
}

// start runs a new tracker in slot i, following its Current status.
func (p *propertyRun) start(i int) *instance {
	p.ids++
	in := &instance{id: p.ids, name: []string{"a", "b"}[i%2], holder: fmt.Sprintf("h%d", (i/2)%2)}
	in.closed = make(chan struct{})
	in.store = leasetest.NewFaultStore(p.rec, leasetest.FaultStoreConfig{Clock: p.clk})
	tr, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
		Store: in.store, Name: in.name, Holder: in.holder, Duration: propDur,
		Clock: p.clk, ReleaseOnClose: p.r.IntN(2) == 0,
	}))
	require.NoError(p.t, err)
	in.tr = tr
	p.wg.Add(1)
	go func() { // follow Current until the tracker closes
		defer p.wg.Done()
		for {
			st, changed := tr.Current()
			p.observe(in, st, nil, p.clk.Now())
			select {
			case <-changed:
			case <-in.closed:
				return
			}
		}
	}()
	return in
}

// check asks in's tracker for atLeast in the background.
func (p *propertyRun) check(in *instance, atLeast time.Duration) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		st, err := in.tr.Check(p.ctx, atLeast)
		p.observe(in, st, err, p.clk.Now())
	}()
}

// closeAll heals and closes every slot, and waits for the closes: those
// that release may wait on a hung revoke's timeout.
func (p *propertyRun) closeAll() {
	for _, in := range p.slots {
		heal(in.store)
		p.close(in)
	}
	for p.closingCount() > 0 {
		p.clk.Advance(propDur)
		runtime.Gosched()
	}
}

func (p *propertyRun) observe(in *instance, st lease.Status, err error, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil && st.State == lease.Held:
		p.counts["held"]++
		if !p.tokens[st.Token] {
			p.tokens[st.Token] = true
			p.counts["terms"]++
		}
		p.held = append(p.held, promise{inst: in, token: st.Token, from: at, until: st.Until})
	case errors.Is(err, lease.ErrRenewalFailed) && st.State == lease.Held:
		p.counts["renewal-failed-held"]++
	case errors.Is(err, lease.ErrRenewalFailed):
		p.counts["renewal-failed-unknown"]++
	case errors.Is(err, lease.ErrNotLeader):
		p.counts["not-leader"]++
	}
	if errors.Is(err, lease.ErrNotLeader) && errors.Is(err, lease.ErrRenewalFailed) {
		p.t.Errorf("an answer is both not-leader and renewal-failed: %v", err)
	}
}

// close begins closing in (its promises end now) without waiting.
func (p *propertyRun) close(in *instance) {
	now := p.clk.Now()
	p.instMu.Lock()
	in.closedAt = now
	p.closing[in] = now
	p.instMu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = in.tr.Close()
		close(in.closed)
		p.instMu.Lock()
		delete(p.closing, in)
		p.instMu.Unlock()
	}()
}

func (p *propertyRun) closingCount() int {
	p.instMu.Lock()
	defer p.instMu.Unlock()
	return len(p.closing)
}

func (p *propertyRun) closedAt(in *instance) time.Time {
	p.instMu.Lock()
	defer p.instMu.Unlock()
	return in.closedAt
}

// settle gives the trackers a bounded chance to finish reacting to the
// last step. It only improves coverage: the properties hold under any
// interleaving.
func (p *propertyRun) settle() {
	for _, in := range p.slots {
		for i := 0; i < 2000 && !settled(p.clk, in.tr) && !blocked(in.store); i++ {
			runtime.Gosched()
		}
	}
}

// ended is a context that has ended.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// blocked reports whether a call of fs waits now, on latency or a Hang.
func blocked(fs *leasetest.FaultStore) bool { return fs.WaitBlocked(ended, 1) == nil }

// checkStoreBacksPromises: at this instant, every open promise is backed
// by the store's live term.
func (p *propertyRun) checkStoreBacksPromises() {
	now := p.clk.Now()
	p.mu.Lock()
	held := append([]promise(nil), p.held...)
	p.mu.Unlock()
	for _, pr := range held {
		if !pr.closedBefore(p, now) && !pr.from.After(now) && now.Before(pr.until) {
			g, err := p.mem.Holder(context.Background(), pr.inst.name)
			if err != nil || g.Token != pr.token {
				p.t.Fatalf("at %v tracker %d (%s/%s) promised token %d until %v, but the store has %+v, %v",
					now.Sub(t0), pr.inst.id, pr.inst.name, pr.inst.holder, pr.token, pr.until.Sub(t0), g, err)
			}
		}
	}
}

func (pr promise) closedBefore(p *propertyRun, now time.Time) bool {
	c := p.closedAt(pr.inst)
	return !c.IsZero() && !c.After(now)
}

// end is when the promise stops: its Until, or the start of its Close.
func (pr promise) end(p *propertyRun) time.Time {
	if c := p.closedAt(pr.inst); !c.IsZero() && c.Before(pr.until) {
		return c
	}
	return pr.until
}

func (p *propertyRun) checkNoOverlap() {
	for i, a := range p.held {
		for _, b := range p.held[i+1:] {
			if a.inst == b.inst || a.inst.name != b.inst.name {
				continue
			}
			aEnd, bEnd := a.end(p), b.end(p)
			if a.from.Before(aEnd) && b.from.Before(bEnd) && a.from.Before(bEnd) && b.from.Before(aEnd) {
				p.t.Fatalf("overlapping Held on %q: tracker %d token %d [%v, %v) and tracker %d token %d [%v, %v)",
					a.inst.name, a.inst.id, a.token, a.from.Sub(t0), aEnd.Sub(t0),
					b.inst.id, b.token, b.from.Sub(t0), bEnd.Sub(t0))
			}
		}
	}
}

// recordingStore records, per token, an upper bound on when the store's
// term ends: the clock after a successful claim or extend plus the duration
// granted (MemStore counts it from when it applied the call, which is no
// later), or the clock after a successful revoke.
type recordingStore struct {
	leasestore.Store
	clk     *testclock.Clock
	mu      sync.Mutex
	ends    map[uint64]time.Time
	revoked map[uint64]bool
}

func (s *recordingStore) granted(g leasestore.Grant, err error) (leasestore.Grant, error) {
	if err == nil {
		end := s.clk.Now().Add(g.Duration)
		s.mu.Lock()
		if !s.revoked[g.Token] && end.After(s.ends[g.Token]) {
			s.ends[g.Token] = end
		}
		s.mu.Unlock()
	}
	return g, err
}

func (s *recordingStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	return s.granted(s.Store.Claim(ctx, name, holder, d))
}

func (s *recordingStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	return s.granted(s.Store.Extend(ctx, g, d))
}

// Lost passes MemStore's LossNotifier through.
func (s *recordingStore) Lost(ctx context.Context, g leasestore.Grant) <-chan struct{} {
	return s.Store.(leasestore.LossNotifier).Lost(ctx, g)
}

func (s *recordingStore) Revoke(ctx context.Context, g leasestore.Grant) error {
	err := s.Store.Revoke(ctx, g)
	if err == nil {
		now := s.clk.Now()
		s.mu.Lock()
		s.revoked[g.Token] = true
		if now.Before(s.ends[g.Token]) {
			s.ends[g.Token] = now
		}
		s.mu.Unlock()
	}
	return err
}

// checkStoreOutlastsPromises: no promise outlives its term in the store.
func (p *propertyRun) checkStoreOutlastsPromises() {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	for _, pr := range p.held {
		end, ok := p.rec.ends[pr.token]
		if !ok {
			p.t.Fatalf("tracker %d promised token %d, which the store never granted", pr.inst.id, pr.token)
		}
		if pe := pr.end(p); pe.After(end) {
			p.t.Fatalf("tracker %d promised token %d until %v, but the store's term ended by %v",
				pr.inst.id, pr.token, pe.Sub(t0), end.Sub(t0))
		}
	}
}
