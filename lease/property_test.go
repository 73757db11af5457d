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
	closedAt     time.Time // zero while open; written by the test goroutine only
}

type propertyRun struct {
	t   *testing.T
	clk *testclock.Clock
	mem *lease.MemStore
	rec *recordingStore
	r   *rand.Rand

	ctx     context.Context // ends the checks still waiting at the end
	wg      sync.WaitGroup
	mu      sync.Mutex // guards the fields below
	held    []promise
	counts  map[string]int
	tokens  map[uint64]bool
	instMu  sync.Mutex
	closing map[*instance]time.Time
}

func runProperty(t *testing.T, seed uint64, steps int) {
	clk := testclock.NewClock(t0)
	stopDrain := make(chan struct{})
	drained := make(chan struct{})
	go func() { // testclock panics when its alarm buffer fills
		defer close(drained)
		for {
			select {
			case <-clk.Alarms():
			case <-stopDrain:
				return
			}
		}
	}()
	defer func() { close(stopDrain); <-drained }()

	ctx, cancel := context.WithCancel(context.Background())
	mem := lease.NewMemStore(clk)
	p := &propertyRun{
		rec: &recordingStore{Store: mem, clk: clk, ends: make(map[uint64]time.Time), revoked: make(map[uint64]bool)},
		t:   t, clk: clk, mem: mem, r: rand.New(rand.NewPCG(seed, 0x1ea5e)),
		ctx: ctx, counts: make(map[string]int), tokens: make(map[uint64]bool), closing: make(map[*instance]time.Time),
	}
	// Six slots on two leases; slots 0 and 4 (and 1 and 5) share both the
	// lease and the holder name, like a process and its restart.
	names := []string{"a", "b"}
	slots := make([]*instance, 6)
	nextID := 0
	start := func(i int) *instance {
		nextID++
		in := &instance{id: nextID, name: names[i%2], holder: fmt.Sprintf("h%d", (i/2)%2)}
		in.store = leasetest.NewFaultStore(p.rec, clk)
		tr, err := lease.NewTracker(lease.Config{
			Store: in.store, Name: in.name, Holder: in.holder, Duration: propDur,
			Jitter: -1, Clock: clk, ReleaseOnClose: p.r.IntN(2) == 0,
		})
		require.NoError(t, err)
		in.tr = tr
		p.wg.Add(1)
		go func() { // follow Changes until the tracker closes
			defer p.wg.Done()
			for st := range tr.Changes() {
				p.observe(in, st, nil, clk.Now())
			}
		}()
		return in
	}
	for i := range slots {
		slots[i] = start(i)
	}

	durations := []time.Duration{10 * time.Millisecond, 300 * time.Millisecond, time.Second,
		2500 * time.Millisecond, 6 * time.Second, 15 * time.Second}
	faults := []leasetest.Fault{leasetest.Pass, leasetest.Timeout, leasetest.AppliedTimeout, leasetest.Hang}
	ops := []leasetest.Op{leasetest.OpClaim, leasetest.OpExtend, leasetest.OpClaim | leasetest.OpExtend}
	for range steps {
		in := slots[p.r.IntN(len(slots))]
		switch k := p.r.IntN(100); {
		case k < 35:
			clk.Advance(durations[p.r.IntN(len(durations))])
		case k < 55:
			atLeast := []time.Duration{0, time.Second, 5 * time.Second, propDur, 2*propDur - propDur/10}[p.r.IntN(5)]
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				st, err := in.tr.Check(p.ctx, atLeast)
				p.observe(in, st, err, clk.Now())
			}()
		case k < 68:
			in.store.Always(ops[p.r.IntN(len(ops))], faults[p.r.IntN(len(faults))])
		case k < 76:
			in.store.Next(ops[p.r.IntN(len(ops))], faults[1+p.r.IntN(len(faults)-1)])
		case k < 84:
			in.store.Always(leasetest.AnyOp, leasetest.Pass)
			in.store.SetLatency(0, 0)
		case k < 88:
			l := [][2]time.Duration{{0, 0}, {300 * time.Millisecond, 300 * time.Millisecond},
				{0, 2 * time.Second}, {time.Second, time.Second}}[p.r.IntN(4)]
			in.store.SetLatency(l[0], l[1])
		case k < 92:
			in.store.Next(leasetest.OpClaim, leasetest.Lost) // a claim denied, holder unnamed
		case k < 95:
			in.store.SignalLost(in.name) // a spurious loss signal
		default: // restart the slot
			i := 0
			for slots[i] != in {
				i++
			}
			p.close(in)
			slots[i] = start(i)
		}
		p.settle(slots)
		p.checkStoreBacksPromises()
	}

	for _, in := range slots {
		in.store.Always(leasetest.AnyOp, leasetest.Pass)
		in.store.SetLatency(0, 0)
		p.close(in)
	}
	// Closes with release may wait on a hung revoke's timeout.
	for p.closingCount() > 0 {
		clk.Advance(propDur)
		runtime.Gosched()
	}
	cancel()
	p.wg.Wait()
	p.checkNoOverlap()
	p.checkStoreOutlastsPromises()

	t.Logf("seed %d: %v", seed, p.counts)
	assert.Greater(t, p.counts["held"], 20, "the run must exercise leadership")
	assert.Positive(t, p.counts["renewal-failed-held"]+p.counts["renewal-failed-unknown"],
		"the run must exercise ambiguous failures")
	assert.Positive(t, p.counts["not-leader"], "the run must exercise contention")
	assert.Greater(t, p.counts["terms"], 4, "leadership must change hands")
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
func (p *propertyRun) settle(slots []*instance) {
	now := p.clk.Now()
	for _, in := range slots {
		for i := 0; i < 2000 && !lease.Settled(in.tr, now) && in.store.Blocked() == 0; i++ {
			runtime.Gosched()
		}
	}
}

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
	lease.Store
	clk     *testclock.Clock
	mu      sync.Mutex
	ends    map[uint64]time.Time
	revoked map[uint64]bool
}

func (s *recordingStore) granted(g lease.Grant, err error) (lease.Grant, error) {
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

func (s *recordingStore) Claim(ctx context.Context, name, holder string, d time.Duration) (lease.Grant, error) {
	return s.granted(s.Store.Claim(ctx, name, holder, d))
}

func (s *recordingStore) Extend(ctx context.Context, g lease.Grant, d time.Duration) (lease.Grant, error) {
	return s.granted(s.Store.Extend(ctx, g, d))
}

// Lost passes MemStore's LossNotifier through.
func (s *recordingStore) Lost(ctx context.Context, g lease.Grant) <-chan struct{} {
	return s.Store.(lease.LossNotifier).Lost(ctx, g)
}

func (s *recordingStore) Revoke(ctx context.Context, g lease.Grant) error {
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
