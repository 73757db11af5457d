package etcdlease

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Renewals are served before every other call, the oldest term first,
// whatever order they came in: a store that cannot renew every term keeps
// the same ones and lets the newest go, rather than missing a renewal of
// each in turn until all have run out.
func TestSlotsServeRenewalsFirstOldestTermFirst(t *testing.T) {
	s := newSlots(1)
	require.NoError(t, s.acquire(context.Background()))
	served := make(chan string, 4)
	queue := func(name string, renewal bool, token uint64) {
		go func() {
			if renewal {
				require.NoError(t, s.acquireRenewal(context.Background(), token))
			} else {
				require.NoError(t, s.acquire(context.Background()))
			}
			served <- name
		}()
	}
	queue("claim", false, 0)
	awaitQueued(t, s, 1)
	queue("renew 9", true, 9)
	awaitQueued(t, s, 2)
	queue("renew 3", true, 3)
	awaitQueued(t, s, 3)
	queue("renew 5", true, 5)
	awaitQueued(t, s, 4)
	for _, want := range []string{"renew 3", "renew 5", "renew 9", "claim"} {
		s.release()
		require.Equal(t, want, <-served)
	}
	s.release()
}

func awaitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	for {
		s.mu.Lock()
		got := len(s.waiting) - s.gone + len(s.renewing) - s.renewingGone
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("waiters never queued")
		default:
			runtime.Gosched()
		}
	}
}

// A keep-alive that waited a twentieth of its TTL for a slot, or gave up,
// makes the store refuse claims for half that TTL, with an error that
// says over capacity and not sent.
func TestLateKeepAliveRefusesClaims(t *testing.T) {
	l := admission{slots: 8}
	t0 := time.Unix(1000, 0)
	ttl := 4 * time.Second
	require.False(t, l.note(t0, t0.Add(199*time.Millisecond), ttl, false), "on time")
	require.NoError(t, l.refusal(t0.Add(time.Second), ttl, 0, false))

	require.True(t, l.note(t0, t0.Add(200*time.Millisecond), ttl, false), "late")
	err := l.refusal(t0.Add(time.Second), ttl, 0, true)
	require.ErrorIs(t, err, ErrOverCapacity)
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	require.ErrorContains(t, err, "keep-alives run late (one waited 200ms of its etcd lease's TTL 4s")
	require.Zero(t, l.claiming, "a refused claim is not admitted")
	require.NoError(t, l.refusal(t0.Add(2200*time.Millisecond), ttl, 0, true), "half the TTL after")
	require.Equal(t, 1, l.claiming)
	l.claimDone()

	require.True(t, l.note(t0, t0.Add(time.Millisecond), ttl, true), "a keep-alive that gave up is late")
}

// Claims are refused once the terms held, with those being claimed, would
// keep more than all the slots busy with renewals.
func TestClaimsRefusedBeyondTheSlots(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 4 * time.Second
	l := admission{slots: 8}
	// No renewal measured yet: one costs three claims' hold, and comes
	// every half TTL.
	l.claimed(100 * time.Millisecond)
	// (52+1) × 300ms / 2s = 7.95 slots busy: fits; 54 terms do not.
	require.NoError(t, l.refusal(t0, ttl, 52, false))
	require.ErrorIs(t, l.refusal(t0.Add(liveCountEvery), ttl, 53, false), ErrOverCapacity)

	l = admission{slots: 8}
	l.renewed(100*time.Millisecond, time.Second)
	// (79+1) × 100ms / 1s = 8 slots: all, admitted; one more is not.
	require.NoError(t, l.refusal(t0, ttl, 79, true))
	err := l.refusal(t0.Add(liveCountEvery), ttl, 79, true)
	require.ErrorIs(t, err, ErrOverCapacity, "the admitted claim counts")
	require.ErrorContains(t, err, "the 80 terms held would keep 8 of the 8 call slots busy")
	require.Equal(t, err, l.refusal(t0.Add(liveCountEvery+time.Millisecond), ttl, 0, true), "a refusal is reused for a while")
	l.claimDone()
	require.NoError(t, l.refusal(t0.Add(2*liveCountEvery), ttl, 79, false))
}

// A term whose etcd lease ran out before its keep-alive, which waited late
// for a slot, was sent is lost to the store's overload, and says so; a
// term lost otherwise does not.
func TestLostLateSaysOverCapacity(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := leasestore.Grant{Name: "singular", Holder: "a", Token: 7}
	gone := recordEnded(leasestore.OpExtend, g, nil)
	known := cachedLease{leaseLife: leaseLife{confirmed: t0, ttl: 4 * time.Second}, lateWait: 600 * time.Millisecond}

	err := lostLate(gone, known, true, t0.Add(4100*time.Millisecond))
	require.ErrorIs(t, err, ErrOverCapacity)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	var nh *leasestore.NotHeldError
	require.True(t, errors.As(err, &nh))
	require.ErrorContains(t, err, "key gone (etcdlease: over capacity: its etcd lease ran out 4.1s after its last confirmed renewal")

	require.Equal(t, gone, lostLate(gone, known, true, t0.Add(3900*time.Millisecond)), "deleted before it could run out")
	known.lateWait = 0
	require.Equal(t, gone, lostLate(gone, known, true, t0.Add(5*time.Second)), "no keep-alive waited late")
	require.Equal(t, gone, lostLate(gone, cachedLease{}, false, t0.Add(5*time.Second)), "nothing known")
}

// A renewal whose wait for a slot ran out of time gave up (the store is
// late); one whose wait was cancelled, by Close or a step-down, did not.
func TestSlotWaitCancelledIsNotLate(t *testing.T) {
	s := newSlots(1)
	require.NoError(t, s.acquire(context.Background()))
	defer s.release()
	wait := func(ctx context.Context) <-chan error {
		out := make(chan error, 1)
		go func() { out <- s.acquireRenewal(ctx, 1) }()
		return out
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := wait(ctx)
	awaitQueued(t, s, 1)
	cancel()
	err := <-cancelled
	require.ErrorIs(t, err, ErrOverCapacity)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, gaveUpOnSlot(err), "cancelled: %v", err)

	expiring := expiringCtx{Context: context.Background(), done: make(chan struct{})}
	expired := wait(expiring)
	awaitQueued(t, s, 1)
	close(expiring.done)
	err = <-expired
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, gaveUpOnSlot(err), "out of time: %v", err)
}

// expiringCtx is a context whose deadline passes when done is closed.
type expiringCtx struct {
	context.Context
	done chan struct{}
}

func (c expiringCtx) Done() <-chan struct{} { return c.done }

func (c expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
