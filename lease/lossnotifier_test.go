package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// A term revoked behind the tracker's back is learned through the store's
// LossNotifier, as a definitive ErrNotLeader, while the renewer was asleep
// until its scheduled renewal: the clock never moves.
func TestRevokedTermIsLearnedBeforeScheduledRenewal(t *testing.T) {
	f := newNotifyingFixture(t, nil, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t), "the renewer sleeps until its renewal")

	require.NoError(t, f.mem.Revoke(context.Background(),
		leasestore.Grant{Name: "singular", Holder: "unit-0", Token: first.Token}))
	st := f.next(t)
	assert.Equal(t, lease.NotHeld, st.State)
	assert.Equal(t, t0, f.clk.Now(), "learned before the scheduled renewal (t0+28.5s)")
	assert.Equal(t, 1, f.store.Calls(leasetest.OpExtend), "learned by asking the store")

	st, err := f.check(t, 0)
	require.ErrorIs(t, err, lease.ErrNotLeader)
	assert.ErrorIs(t, err, leasestore.ErrNotHeld, "the store's definitive answer")
	assert.NotErrorIs(t, err, lease.ErrRenewalFailed)
	assert.Equal(t, lease.NotHeld, st.State)

	// The lease is free: the tracker claims a new term soon, and watches it.
	f.expectIdle(t, firstRetry)
	again := f.nextState(t, lease.Held)
	assert.Greater(t, again.Token, first.Token)
	assert.Equal(t, 1, f.store.SignalLost("singular"), "the new term is watched")
}

// A Lost signal is only a hint: while the store still holds the term, the
// renewal it triggers confirms the term and the tracker stays Held with the
// same token. The watch resumes from the next confirmation, so a notifier
// that keeps signalling costs at most one extra store call per renewal.
func TestSpuriousLostSignalKeepsHeldWithSameToken(t *testing.T) {
	f := newNotifyingFixture(t, nil, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(10 * time.Second)

	require.Equal(t, 1, f.store.SignalLost("singular"), "the tracker watches its term")
	st := f.next(t)
	assert.Equal(t, lease.Status{State: lease.Held, Holder: "unit-0", Token: first.Token,
		Until: t0.Add(10*time.Second + until0)}, st, "renewed at once, same term")
	assert.Equal(t, 1, f.store.Calls(leasetest.OpExtend))
	st, err := f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, first.Token, st.Token)

	require.Equal(t, renewAt, f.nextIdle(t), "back on the normal schedule")
	assert.Zero(t, f.store.SignalLost("singular"), "not re-watched on the confirmation of a spurious signal")
	f.clk.Advance(renewAt)
	f.next(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(time.Second) // so that the next renewal publishes a new Until
	assert.Equal(t, 1, f.store.SignalLost("singular"), "re-watched from the next confirmation")
	st = f.next(t)
	assert.Equal(t, lease.Status{State: lease.Held, Holder: "unit-0", Token: first.Token,
		Until: t0.Add(10*time.Second + renewAt + time.Second + until0)}, st)
	assert.Equal(t, 3, f.store.Calls(leasetest.OpExtend))
}

// A Lost signal followed by an ambiguous renewal is not a loss: the
// tracker stays Held for the validity it was promised, and retries.
func TestLostSignalWithAmbiguousRenewalIsNotNotLeader(t *testing.T) {
	f := newNotifyingFixture(t, nil, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t))
	f.clk.Advance(10 * time.Second)
	f.store.Always(leasetest.OpExtend, leasetest.Timeout)

	require.Equal(t, 1, f.store.SignalLost("singular"))
	require.Equal(t, firstRetry, f.nextIdle(t), "the signal's renewal failed ambiguously; retrying")
	st, err := f.check(t, 0)
	require.NoError(t, err, "the promise still holds")
	assert.Equal(t, first, st)
	st, err = f.check(t, 50*time.Second) // needs a renewal, which times out
	requireRenewalFailedHeld(t, st, err, first.Until)
}

// countingStore is a LossNotifier that never signals and counts the open
// watches per token, so tests can see when the tracker ends one.
type countingStore struct {
	leasestore.Store
	mu      sync.Mutex
	open    map[uint64]int
	changed chan struct{} // closed and replaced on every change
}

func newCountingStore(s leasestore.Store) *countingStore {
	return &countingStore{Store: s, open: make(map[uint64]int), changed: make(chan struct{})}
}

func (s *countingStore) Lost(ctx context.Context, g leasestore.Grant) <-chan struct{} {
	s.add(g.Token, 1)
	context.AfterFunc(ctx, func() { s.add(g.Token, -1) })
	return make(chan struct{})
}

func (s *countingStore) add(token uint64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[token] += n; s.open[token] == 0 {
		delete(s.open, token)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitOpen waits until the open watches are exactly want.
func (s *countingStore) waitOpen(t *testing.T, want map[uint64]int) {
	t.Helper()
	deadline := time.After(wait)
	for {
		s.mu.Lock()
		got := make(map[uint64]int, len(s.open))
		for k, v := range s.open {
			got[k] = v
		}
		changed := s.changed
		s.mu.Unlock()
		if assert.ObjectsAreEqual(want, got) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("open watches %v, want %v", got, want)
		}
	}
}

// The tracker watches exactly the term it holds: one watch per term, ended
// on a loss, replaced on a new term, ended on Close.
func TestLossWatchFollowsTermAndEndsOnClose(t *testing.T) {
	var cs *countingStore
	f := newFixture(t, func(c *lease.Config) {
		cs = newCountingStore(c.Store)
		c.Store = cs
	}, nil)
	first := f.held(t)
	cs.waitOpen(t, map[uint64]int{first.Token: 1})
	f.expectIdle(t, renewAt)
	f.nextState(t, lease.Held)
	cs.waitOpen(t, map[uint64]int{first.Token: 1}) // renewals keep the one watch

	f.store.Next(leasetest.OpExtend, leasetest.Lost)
	f.expectIdle(t, renewAt)
	f.nextState(t, lease.NotHeld)
	cs.waitOpen(t, map[uint64]int{})

	f.expectIdle(t, firstRetry)
	second := f.nextState(t, lease.Held)
	cs.waitOpen(t, map[uint64]int{second.Token: 1})

	require.NoError(t, f.tr.Close())
	cs.waitOpen(t, map[uint64]int{})
}

func TestCheckFastPathWithLossNotifierDoesNotAllocate(t *testing.T) {
	assertCheckDoesNotAllocate(t, newNotifyingFixture(t, nil, nil))
}

// alwaysLost is a misbehaving LossNotifier: every watch fires at once,
// although the store still holds the term.
type alwaysLost struct{ leasestore.Store }

func (alwaysLost) Lost(context.Context, leasestore.Grant) <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// A notifier that keeps signalling cannot make the tracker hammer the
// store, nor make it report a loss: each signal the store contradicts costs
// one extra extend, and the term is watched again only from the next
// scheduled renewal.
func TestMisbehavingNotifierCostsAtMostOneCallPerRenewal(t *testing.T) {
	f := newFixture(t, func(c *lease.Config) { c.Store = alwaysLost{c.Store} }, nil)
	first := f.held(t)
	require.Equal(t, renewAt, f.nextIdle(t), "the claim's schedule")
	require.Equal(t, renewAt, f.nextIdle(t), "the signal's extend, at once, then the same schedule")
	assert.Equal(t, 1, f.store.Calls(leasetest.OpExtend))
	assert.True(t, settled(f.clk, f.tr), "asleep, not watching: nothing wakes it before the renewal")

	for i := range 3 {
		f.clk.Advance(renewAt)
		require.Equal(t, renewAt, f.nextIdle(t), "the scheduled extend")
		require.Equal(t, renewAt, f.nextIdle(t), "the signal's extend")
		assert.Equal(t, 3+2*i, f.store.Calls(leasetest.OpExtend))
	}
	st, err := f.check(t, dur)
	require.NoError(t, err)
	assert.Equal(t, first.Token, st.Token)
}
