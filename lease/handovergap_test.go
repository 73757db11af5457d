package lease_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// The leaderless gap a follower saw when the lease was handed over to it
// (Report.HandOvers, HandOverGaps), in a testing/synctest bubble on a
// MemStore: after a release and after a crash, by a follower woken by the
// store's watch and by one that polls. A watching follower measures from
// the watch's word that the term was over — the release, or the term's
// expiry — so its gap is exactly the hand-over's; a polling one measures
// from its last refused claim, so its gap is at most a ClaimInterval and
// never less than the true one.

// lastRefusal passes calls to a Store and records when it last refused a
// claim (refused, if set, is told of each refusal without blocking).
type lastRefusal struct {
	leasestore.Store
	refused chan struct{}
	mu      sync.Mutex
	at      time.Time
}

func (s *lastRefusal) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	g, err := s.Store.Claim(ctx, name, holder, d)
	if err != nil {
		s.mu.Lock()
		s.at = time.Now()
		s.mu.Unlock()
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return g, err
}

func (s *lastRefusal) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}

// handOverGap runs a hand-over from a to b, by release or by crash, and
// returns b's Report once it holds the lease, how long after a stopped it
// did, and when b's last claim was refused.
func handOverGap(t *testing.T, cfg lease.Config, watch, release bool) (lease.Report, time.Duration, time.Time) {
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
	follower := &lastRefusal{Store: mem, refused: make(chan struct{}, 1)}
	store := followerStore(watch, mem, follower)
	leader := cfg
	leader.ReleaseOnClose = release
	a := startTimed(t, leader, mem, "l", "a")
	awaitStatus(a, lease.Held)
	b := startTimed(t, cfg, store, "l", "b")
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	awaitStatus(b, lease.NotHeld)
	time.Sleep(5 * cfg.Duration) // b waits, a renews
	require.Zero(t, b.Report().HandOvers, "no hand-over while a holds the lease")

	if release {
		// a releases right after one of b's claims was refused: the
		// worst moment for a poll.
		select {
		case <-follower.refused:
		default:
		}
		<-follower.refused
	} else {
		awaitRenewals(t, a, 1) // a dies right after a renewal: its term runs 2×Duration on
	}
	stopped := time.Now()
	require.NoError(t, a.Close())
	awaitStatus(b, lease.Held)
	took := time.Since(stopped)
	ra := a.Report()
	assert.Zero(t, ra.HandOvers, "a claimed a free lease: no hand-over")
	assert.Zero(t, ra.HandOverGaps)
	return b.Report(), took, follower.last()
}

func TestHandOverGapGraceful(t *testing.T) {
	cfg := lease.Config{Duration: 2 * time.Second}
	t.Run("watches", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, took, _ := handOverGap(t, cfg, true, true)
			assert.Equal(t, uint64(1), r.HandOvers)
			assert.Equal(t, took, r.HandOverGaps, "from the release the watch reported to Held")
			assert.LessOrEqual(t, r.HandOverGaps, time.Millisecond, "the wake spread")
		})
	})
	t.Run("polls", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, took, refused := handOverGap(t, cfg, false, true)
			assert.Equal(t, uint64(1), r.HandOvers)
			assert.Equal(t, r.Since.Sub(refused), r.HandOverGaps, "from the last refused claim to Held")
			assert.Equal(t, took, r.HandOverGaps, "released as the last claim was refused")
			assert.LessOrEqual(t, r.HandOverGaps, cfg.Duration/10, "a ClaimInterval at most")
			assert.Positive(t, r.HandOverGaps)
		})
	})
}

func TestHandOverGapCrash(t *testing.T) {
	cfg := lease.Config{Duration: 2 * time.Second}
	t.Run("watches", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, took, _ := handOverGap(t, cfg, true, false)
			assert.Equal(t, uint64(1), r.HandOvers)
			assert.Equal(t, took-2*cfg.Duration, r.HandOverGaps, "from the term's expiry the watch reported to Held")
			assert.LessOrEqual(t, r.HandOverGaps, 5*time.Millisecond, "the wake spread")
		})
	})
	t.Run("polls", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, took, refused := handOverGap(t, cfg, false, false)
			assert.Equal(t, uint64(1), r.HandOvers)
			assert.Equal(t, r.Since.Sub(refused), r.HandOverGaps, "from the last refused claim to Held")
			assert.GreaterOrEqual(t, r.HandOverGaps, took-2*cfg.Duration, "never less than the true gap")
			assert.LessOrEqual(t, r.HandOverGaps, cfg.Duration/10, "a ClaimInterval at most")
		})
	})
}

// Gaps add up over hand-overs, and a tracker that loses its own term and
// claims it back at once has had no hand-over.
func TestHandOverGapsAddUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := lease.Config{Duration: 2 * time.Second, ReleaseOnClose: true}
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		b := startTimed(t, cfg, mem, "l", "b")
		defer func() { require.NoError(t, b.Close()) }()
		first := awaitStatus(b, lease.Held)
		// b's own term is revoked behind its back: it learns of the loss
		// and claims the free lease again, no other holder in between.
		require.NoError(t, mem.Revoke(context.Background(), leasestore.Grant{Name: "l", Holder: "b", Token: first.Token}))
		awaitStatus(b, lease.NotHeld)
		awaitStatus(b, lease.Held)
		require.Zero(t, b.Report().HandOvers, "its own term again: no hand-over")

		var sum time.Duration
		for i := range 3 {
			// Another holder takes the lease from under b, leads a while
			// and releases it.
			st, _ := b.Current()
			require.NoError(t, mem.Revoke(context.Background(), leasestore.Grant{Name: "l", Holder: "b", Token: st.Token}))
			g, err := mem.Claim(context.Background(), "l", "x", 2*cfg.Duration)
			require.NoError(t, err)
			awaitStatus(b, lease.NotHeld)
			time.Sleep(cfg.Duration)
			released := time.Now()
			require.NoError(t, mem.Revoke(context.Background(), g))
			awaitStatus(b, lease.Held)
			sum += time.Since(released)
			r := b.Report()
			assert.Equal(t, uint64(i+1), r.HandOvers)
			assert.Equal(t, sum, r.HandOverGaps)
		}
	})
}
