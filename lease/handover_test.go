package lease_test

import (
	"context"
	"fmt"
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

// Hand-over through a ReleaseWatcher, in testing/synctest bubbles at the
// defaults (Duration 2s: ClaimInterval 200ms, a term of 4s, a wake spread
// of at most 1ms). Every tracker's status changes go to a history
// Recorder, which must find no broken promise in any run.

const handoverDuration = 2 * time.Second

// recorded follows trackers' statuses into a history.
type recorded struct {
	rec  history.Recorder
	wg   sync.WaitGroup
	once sync.Once
	stop chan struct{}
}

// newRecorded returns a recorder whose followers end with the test, also
// when it fails before verify.
func newRecorded(t *testing.T) *recorded {
	r := &recorded{stop: make(chan struct{})}
	t.Cleanup(r.end)
	return r
}

// end stops following.
func (r *recorded) end() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}

// follow records every status tr publishes, as node, until verify.
func (r *recorded) follow(node string, tr *lease.Tracker) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			st, changed := tr.Current()
			r.rec.Record(history.Answer{Lease: "l", Node: node, Call: history.CallCurrent, Status: st, Returned: time.Now()})
			select {
			case <-changed:
			case <-r.stop:
				return
			}
		}
	}()
}

// closed records tr's Close, a release with ReleaseOnClose.
func (r *recorded) closed(t *testing.T, node string, tr *lease.Tracker) {
	asked := time.Now()
	err := tr.Close()
	require.NoError(t, err)
	r.rec.Record(history.Answer{Lease: "l", Node: node, Call: history.CallStepDown, Err: err, Asked: asked, Returned: time.Now()})
}

// verify stops following and fails t for each broken promise.
func (r *recorded) verify(t *testing.T) {
	r.end()
	for _, v := range r.rec.Verify() {
		t.Error(v)
	}
}

func startFollower(t *testing.T, store leasestore.Store, holder string, mod func(*lease.Config)) *lease.Tracker {
	cfg := lease.Config{Store: store, Name: "l", Holder: holder, Duration: handoverDuration}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	return tr
}

func TestGracefulHandOverIsAtTheReleaseNotTheNextPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorded(t)
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		a := startFollower(t, mem, "a", func(c *lease.Config) { c.ReleaseOnClose = true })
		r.follow("a", a)
		held := awaitStatus(a, lease.Held)
		b := startFollower(t, mem, "b", nil)
		r.follow("b", b)
		defer func() { require.NoError(t, b.Close()) }()
		// b's claim was refused just now: a poll would come a
		// ClaimInterval (less up to 10 %) later.
		awaitStatus(b, lease.NotHeld)
		time.Sleep(time.Millisecond)
		released := time.Now()
		r.closed(t, "a", a)
		st := awaitStatus(b, lease.Held)
		took := time.Since(released)
		assert.Greater(t, st.Token, held.Token)
		assert.LessOrEqual(t, took, 5*time.Millisecond, "hand-over at the release plus the wake spread")
		t.Logf("graceful hand-over %v", took)
		r.verify(t)
	})
}

func TestCrashTakeoverStillWaitsOutThePromise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorded(t)
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		a := startFollower(t, mem, "a", nil)
		r.follow("a", a)
		// a holds before b starts: if b's first claim won the race, a
		// would never hold, and the wait below would run fake time on
		// forever (b renewing) instead of failing.
		awaitStatus(a, lease.Held)
		b := startFollower(t, mem, "b", nil)
		r.follow("b", b)
		defer func() { require.NoError(t, b.Close()) }()
		last := awaitRenewals(t, a, 3)
		// a dies right after a renewal, without releasing: its term
		// runs 2×Duration from now, its promise a Margin less.
		crashed := time.Now()
		claims := mem.StoreReport().Claim
		require.NoError(t, a.Close())
		st := awaitStatus(b, lease.Held)
		took := time.Since(crashed)
		assert.Greater(t, st.Token, last.Token)
		assert.GreaterOrEqual(t, took, 2*handoverDuration, "b led before a's term ran out")
		assert.LessOrEqual(t, took, 2*handoverDuration+5*time.Millisecond, "no poll after the term ran out")
		// b's fallback poll, once a term, may fall in the wait; the
		// takeover is one claim.
		after := mem.StoreReport().Claim
		assert.Equal(t, claims.OK+1, after.OK)
		assert.LessOrEqual(t, after.Definitive-claims.Definitive, uint64(1), "refused claims while a's term ran")
		t.Logf("crash takeover %v", took)
		r.verify(t)
	})
}

func TestHundredFollowersOneWinsTheOthersClaimOnce(t *testing.T) {
	const followers = 100
	synctest.Test(t, func(t *testing.T) {
		r := newRecorded(t)
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		a := startFollower(t, mem, "a", func(c *lease.Config) { c.ReleaseOnClose = true })
		r.follow("a", a)
		held := awaitStatus(a, lease.Held)
		var trs []*lease.Tracker
		for i := range followers {
			tr := startFollower(t, mem, fmt.Sprintf("f%d", i), nil)
			r.follow(fmt.Sprintf("f%d", i), tr)
			awaitStatus(tr, lease.NotHeld)
			trs = append(trs, tr)
		}
		defer func() {
			for _, tr := range trs {
				require.NoError(t, tr.Close())
			}
		}()
		time.Sleep(time.Second) // fewer than a term: no fallback poll
		before := mem.StoreReport().Claim
		r.closed(t, "a", a)
		time.Sleep(handoverDuration) // all woken, well before a fallback poll
		after := mem.StoreReport().Claim

		var winners []string
		for _, tr := range trs {
			st, _ := tr.Current()
			if st.State == lease.Held {
				winners = append(winners, st.Holder)
				assert.Greater(t, st.Token, held.Token)
			}
		}
		require.Len(t, winners, 1, "one winner")
		for _, tr := range trs {
			st, _ := tr.Current()
			if st.State != lease.Held {
				assert.Equal(t, lease.NotHeld, st.State)
				assert.Equal(t, winners[0], st.Holder, "the losers name the winner")
			}
		}
		assert.Equal(t, uint64(1), after.OK-before.OK, "one claim won")
		assert.Equal(t, uint64(followers-1), after.Definitive-before.Definitive,
			"each loser sent one refused claim, and no more")
		t.Logf("%d claims after the release, 1 won", after.OK+after.Definitive-before.OK-before.Definitive)
		r.verify(t)
	})
}

func TestWaitingFollowerSendsAtMostOneCallASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		a := startFollower(t, mem, "a", nil)
		defer func() { require.NoError(t, a.Close()) }()
		awaitStatus(a, lease.Held)
		b := startFollower(t, mem, "b", nil)
		defer func() { require.NoError(t, b.Close()) }()
		awaitStatus(b, lease.NotHeld)
		const wait = time.Hour
		before := mem.StoreReport()
		time.Sleep(wait)
		after := mem.StoreReport()
		claims := after.Claim.Definitive - before.Claim.Definitive
		rate := float64(claims) / wait.Seconds()
		t.Logf("a waiting follower sent %d claims in %v: %.3f/s (stated %.3f/s)",
			claims, wait, rate, lease.Config{Store: mem, Duration: handoverDuration}.Timing().ClaimRate)
		assert.LessOrEqual(t, rate, 1.0)
		assert.Equal(t, uint64(0), after.Claim.OK-before.Claim.OK)
	})
}

// A watch that fails leaves the follower polling every ClaimInterval, and
// changes nothing it reports.
func TestReleaseWatchFailureFallsBackToPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorded(t)
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		fs := leasetest.NewFaultStore(mem, leasetest.FaultStoreConfig{})
		a := startFollower(t, mem, "a", func(c *lease.Config) { c.ReleaseOnClose = true })
		r.follow("a", a)
		awaitStatus(a, lease.Held)
		b := startFollower(t, fs, "b", nil)
		r.follow("b", b)
		defer func() { require.NoError(t, b.Close()) }()
		waiting := awaitStatus(b, lease.NotHeld)
		_, changed := b.Current()
		synctest.Wait()
		claims := fs.Calls(leasetest.OpClaim)

		require.Equal(t, 1, fs.BreakReleaseWatches("l"))
		synctest.Wait()
		select {
		case <-changed:
			t.Fatal("a broken watch changed b's status")
		default:
		}
		st, _ := b.Current()
		assert.Equal(t, waiting, st, "still NotHeld, a named")
		assert.Equal(t, claims, fs.Calls(leasetest.OpClaim), "no claim for a broken watch")

		// b polls: its next claim comes within a ClaimInterval, not a
		// term; refused, it watches again.
		broke := time.Now()
		for fs.Calls(leasetest.OpClaim) == claims {
			time.Sleep(time.Millisecond)
		}
		assert.LessOrEqual(t, time.Since(broke), handoverDuration/10)
		synctest.Wait()
		released := time.Now()
		r.closed(t, "a", a)
		awaitStatus(b, lease.Held)
		assert.LessOrEqual(t, time.Since(released), 5*time.Millisecond, "watching again after the poll")
		r.verify(t)
	})
}

// Over a store that does not watch, every watch fails at once: the
// follower polls at the ClaimInterval's rate, never faster.
func TestFailingWatchesPollAtTheClaimInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		fs := leasetest.NewFaultStore(polled{mem}, leasetest.FaultStoreConfig{})
		a := startFollower(t, mem, "a", nil)
		defer func() { require.NoError(t, a.Close()) }()
		awaitStatus(a, lease.Held)
		b := startFollower(t, fs, "b", func(c *lease.Config) { *c = lease.WithoutJitterForTest(*c) })
		defer func() { require.NoError(t, b.Close()) }()
		awaitStatus(b, lease.NotHeld)
		synctest.Wait()
		claims := fs.Calls(leasetest.OpClaim)
		time.Sleep(10 * handoverDuration)
		synctest.Wait()
		assert.Equal(t, 100, fs.Calls(leasetest.OpClaim)-claims, "one claim per ClaimInterval")
		st, _ := b.Current()
		assert.Equal(t, lease.NotHeld, st.State)
		assert.Equal(t, "a", st.Holder)
	})
}

// spurious is a store whose release watch says "over" at once, every time.
type spurious struct{ leasestore.Store }

func (spurious) WatchRelease(context.Context, *leasestore.HeldError) <-chan error {
	ch := make(chan error)
	close(ch)
	return ch
}

// A watch that says the term is over when the store then names the same
// term is not trusted again for it: the follower polls every
// ClaimInterval, never claiming at the wake spread's pace.
func TestSpuriousReleaseWatchDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		a := startFollower(t, mem, "a", nil)
		defer func() { require.NoError(t, a.Close()) }()
		awaitStatus(a, lease.Held)
		b := startFollower(t, spurious{mem}, "b", func(c *lease.Config) { *c = lease.WithoutJitterForTest(*c) })
		defer func() { require.NoError(t, b.Close()) }()
		awaitStatus(b, lease.NotHeld)
		synctest.Wait() // b's claim after the watch's first "over"
		before := mem.StoreReport().Claim.Definitive
		time.Sleep(10 * handoverDuration)
		synctest.Wait()
		assert.Equal(t, uint64(100), mem.StoreReport().Claim.Definitive-before, "one claim per ClaimInterval")
		st, _ := b.Current()
		assert.Equal(t, "a", st.Holder)
	})
}
