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
)

// Each figure Config.Timing states is checked by running its case in a
// testing/synctest bubble (trackers and stores on their default clocks, in
// fake time) on the adversarial schedule: the measured figure must never
// be worse than the stated one, and must reach it — to the nanosecond
// without jitter, and within what jitter takes off (it only ever
// shortens a wait) with it. A wrong formula fails one side or the other.

// timingSettings are the Configs the tests run: the defaults, a long lease
// with a wide Margin, and a short one renewing early.
var timingSettings = []struct {
	name string
	cfg  lease.Config
}{
	{"defaults", lease.Config{Duration: 2 * time.Second}},
	{"Duration=10s,Margin=2s", lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}},
	{"Duration=2s,RenewFraction=0.3", lease.Config{Duration: 2 * time.Second, RenewFraction: 0.3}},
}

// eachTiming runs f for each setting as given and without jitter.
func eachTiming(t *testing.T, f func(t *testing.T, cfg lease.Config)) {
	for _, s := range timingSettings {
		t.Run(s.name, func(t *testing.T) { f(t, s.cfg) })
		noJitter := lease.WithoutJitterForTest(s.cfg)
		t.Run(s.name+",no-jitter", func(t *testing.T) { f(t, noJitter) })
	}
}

// jitterOf is the most a scheduled call of a tracker with cfg comes early,
// as a fraction of its wait: a tenth, or none without jitter.
func jitterOf(cfg lease.Config) float64 { return lease.JitterOfForTest(cfg) }

// shortenedBy is the most jitter takes off a wait d with cfg.
func shortenedBy(cfg lease.Config, d time.Duration) time.Duration {
	return time.Duration(float64(d) * jitterOf(cfg))
}

// promiseOf is the longest promise a tracker with cfg gives:
// 2×Duration − Margin.
func promiseOf(cfg lease.Config) time.Duration {
	if cfg.Margin == 0 {
		cfg.Margin = cfg.Duration / 10
	}
	return 2*cfg.Duration - cfg.Margin
}

// polled hides a Store's ReleaseWatcher: its followers poll.
type polled struct{ leasestore.Store }

// watched passes a ReleaseWatcher's watch through a wrapper of it.
type watched struct {
	leasestore.Store
	w leasestore.ReleaseWatcher
}

func (s watched) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	return s.w.WatchRelease(ctx, held)
}

// eachFollower runs f with a follower that polls (the MemStore's watch
// hidden) and with one that waits on the MemStore's watch.
func eachFollower(t *testing.T, f func(t *testing.T, watch bool)) {
	t.Run("polls", func(t *testing.T) { f(t, false) })
	t.Run("watches", func(t *testing.T) { f(t, true) })
}

// followerStore is s, a wrapper of mem, with mem's watch when watch is set
// and without any otherwise.
func followerStore(watch bool, mem *leasestore.MemStore, s leasestore.Store) leasestore.Store {
	if watch {
		return watched{Store: s, w: mem}
	}
	return polled{s}
}

// takeoverShortenedBy is the most jitter takes off a stated takeover: a
// polling follower's ClaimInterval is shortened by up to a tenth of it, a
// watching follower's wake spread is drawn from all of [0, spread].
func takeoverShortenedBy(cfg lease.Config, want lease.Timing) time.Duration {
	if _, ok := cfg.Store.(leasestore.ReleaseWatcher); ok {
		return want.GracefulTakeover
	}
	return shortenedBy(cfg, want.GracefulTakeover)
}

// startTimed starts a tracker of cfg for holder on lease name in store.
func startTimed(t *testing.T, cfg lease.Config, store leasestore.Store, name, holder string) *lease.Tracker {
	cfg.Store, cfg.Name, cfg.Holder = store, name, holder
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	return tr
}

// awaitStatus waits, in fake time, until tr's status is in state s, and
// returns it.
func awaitStatus(tr *lease.Tracker, s lease.State) lease.Status {
	for {
		st, changed := tr.Current()
		if st.State == s {
			return st
		}
		<-changed
	}
}

// awaitRenewals waits, in fake time, until tr is Held and has renewed n
// times; it returns at the instant the last renewal was published.
func awaitRenewals(t *testing.T, tr *lease.Tracker, n int) lease.Status {
	st := awaitStatus(tr, lease.Held)
	for range n {
		next, changed := tr.Current()
		for next.Until.Equal(st.Until) {
			<-changed
			next, changed = tr.Current()
		}
		require.Equal(t, lease.Held, next.State)
		require.Equal(t, st.Token, next.Token, "renewed, same term")
		st = next
	}
	return st
}

func TestTimingOutageIsRiddenHeldUntilTheStatedFigure(t *testing.T) {
	const tick = time.Millisecond
	eachTiming(t, func(t *testing.T, cfg lease.Config) {
		synctest.Test(t, func(t *testing.T) {
			want := cfg.Timing()
			ctx := context.Background()
			fs := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{}), leasetest.FaultStoreConfig{})
			tr := startTimed(t, cfg, fs, "l", "a")
			defer func() { require.NoError(t, tr.Close()) }()
			last := awaitRenewals(t, tr, 3)

			// The store stops answering. No call comes before the next
			// renewal, and an outage that begins just before it is the
			// worst: it leaves the least of the promise to ride.
			fs.Always(leasetest.AnyOp, leasetest.Hang)
			require.NoError(t, fs.WaitBlocked(ctx, 1))
			began := time.Now()
			published := make(chan time.Time, 1)
			go func() {
				awaitStatus(tr, lease.Unknown)
				published <- time.Now()
			}()
			require.Less(t, last.Until.Sub(began), last.Until.Sub(last.Until.Add(-2*cfg.Duration)), "the outage began after the renewal")

			// Check answers Held at every tick until the first Unknown,
			// which comes at the promise's end. (A Check that asks at the
			// end waits for the store call it starts, bounded by its ctx:
			// a tick here.)
			var st lease.Status
			var err error
			var asked time.Time
			for {
				asked = time.Now()
				tctx, cancel := context.WithTimeout(ctx, tick)
				st, err = tr.Check(tctx, 0)
				cancel()
				if st.State != lease.Held {
					break
				}
				require.NoError(t, err)
				time.Sleep(tick)
			}
			rode := st.Until.Sub(began) // Unknown from the promise's end on
			require.Equal(t, lease.Unknown, st.State)
			require.Error(t, err)
			assert.Equal(t, last.Until, st.Until, "the promise of the last renewal")
			assert.False(t, asked.Before(st.Until), "Unknown at %v, before the promise's end", asked.Sub(began))
			assert.Less(t, asked.Sub(st.Until), tick, "first Unknown within a tick of the promise's end")
			assert.Equal(t, st.Until, <-published, "Current says Unknown at the promise's end")
			assert.GreaterOrEqual(t, rode, want.Outage, "Unknown before the stated outage")
			assert.LessOrEqual(t, rode, want.Outage+shortenedBy(cfg, promiseOf(cfg)-want.Outage),
				"stated outage %v not reached", want.Outage)
			t.Logf("outage ridden %v, stated %v", rode, want.Outage)

			fs.Always(leasetest.AnyOp, leasetest.Pass)
			awaitStatus(tr, lease.Held) // its term, or a new one if that ran out
		})
	})
}

func TestTimingCrashTakeoverIsAtMostTheStatedFigure(t *testing.T) {
	eachTiming(t, func(t *testing.T, cfg lease.Config) {
		eachFollower(t, func(t *testing.T, watch bool) { crashTakeover(t, cfg, watch) })
	})
}

// crashTakeover runs a crash takeover by a follower that watches or polls
// and checks it against cfg's stated figure.
func crashTakeover(t *testing.T, cfg lease.Config, watch bool) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		store := followerStore(watch, mem, mem)
		cfg.Store = store
		want := cfg.Timing()
		a := startTimed(t, cfg, mem, "l", "a")
		held := awaitRenewals(t, a, 3)

		// a dies right after a renewal (no release): its term runs
		// 2×Duration from now. A successor's claim refused just before
		// that term ends is the worst case. Starting it then is the
		// same as a follower that waited all along and whose claim
		// fell there: each refused claim is followed by the same wait
		// (or the same watch, which fires when the term expires).
		crashed := time.Now()
		require.NoError(t, a.Close())
		time.Sleep(2*cfg.Duration - 1)
		b := startTimed(t, cfg, store, "l", "b")
		defer func() { require.NoError(t, b.Close()) }()
		st := awaitStatus(b, lease.Held)
		took := time.Since(crashed)
		assert.Greater(t, st.Token, held.Token)
		assert.LessOrEqual(t, took, want.CrashTakeover)
		assert.GreaterOrEqual(t, took, want.CrashTakeover-takeoverShortenedBy(cfg, want)-1,
			"stated crash takeover %v not reached", want.CrashTakeover)
		assert.GreaterOrEqual(t, took, 2*cfg.Duration, "b led before a's term ran out")
		t.Logf("crash takeover %v, stated %v", took, want.CrashTakeover)
	})
}

// refusedClaims passes calls to a Store and says when a claim was refused.
type refusedClaims struct {
	leasestore.Store
	refused chan struct{}
}

func (s *refusedClaims) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	g, err := s.Store.Claim(ctx, name, holder, d)
	if err != nil {
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return g, err
}

func TestTimingGracefulTakeoverIsAtMostTheStatedFigure(t *testing.T) {
	eachTiming(t, func(t *testing.T, cfg lease.Config) {
		eachFollower(t, func(t *testing.T, watch bool) { gracefulTakeover(t, cfg, watch) })
	})
}

// gracefulTakeover runs a graceful takeover by a follower that watches or
// polls and checks it against cfg's stated figure.
func gracefulTakeover(t *testing.T, cfg lease.Config, watch bool) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		follower := &refusedClaims{Store: mem, refused: make(chan struct{}, 1)}
		store := followerStore(watch, mem, follower)
		cfg.Store = store
		want := cfg.Timing()
		leader := cfg
		leader.ReleaseOnClose = true
		a := startTimed(t, leader, mem, "l", "a")
		held := awaitStatus(a, lease.Held)
		b := startTimed(t, cfg, store, "l", "b")
		defer func() { require.NoError(t, b.Close()) }()
		time.Sleep(10 * cfg.Duration)

		// a releases right after one of b's claims was refused: the
		// worst moment for a poll, b waits a whole ClaimInterval for
		// its next. A watching b is woken by the release.
		select {
		case <-follower.refused:
		default:
		}
		<-follower.refused
		released := time.Now()
		require.NoError(t, a.Close())
		st := awaitStatus(b, lease.Held)
		took := time.Since(released)
		assert.Greater(t, st.Token, held.Token)
		assert.LessOrEqual(t, took, want.GracefulTakeover)
		assert.GreaterOrEqual(t, took, want.GracefulTakeover-takeoverShortenedBy(cfg, want),
			"stated graceful takeover %v not reached", want.GracefulTakeover)
		t.Logf("graceful takeover %v, stated %v", took, want.GracefulTakeover)
	})
}

// callTimes passes calls to a Store and records, per holder, the first
// and last time it extended and claimed, and how often.
type callTimes struct {
	leasestore.Store
	mu             sync.Mutex
	extend, claims map[string]*callSpan
}

type callSpan struct {
	first, last time.Time
	n           int
}

func (s *callTimes) add(m map[string]*callSpan, holder string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := m[holder]
	if sp == nil {
		sp = &callSpan{first: now}
		m[holder] = sp
	}
	sp.last = now
	sp.n++
}

func (s *callTimes) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	s.add(s.claims, holder)
	return s.Store.Claim(ctx, name, holder, d)
}

func (s *callTimes) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	s.add(s.extend, g.Holder)
	return s.Store.Extend(ctx, g, d)
}

// perSecond is the rate of the calls in m: calls over time, pooled over
// holders (each holder's span counts its calls but the first).
func perSecond(m map[string]*callSpan) float64 {
	var span time.Duration
	n := 0
	for _, sp := range m {
		span += sp.last.Sub(sp.first)
		n += sp.n - 1
	}
	return float64(n) / span.Seconds()
}

func TestTimingCallRatesAreTheStatedFigures(t *testing.T) {
	eachTiming(t, func(t *testing.T, cfg lease.Config) {
		eachFollower(t, func(t *testing.T, watch bool) { callRates(t, cfg, watch) })
	})
}

// callRates runs 20 holders and followers that watch or poll, and checks
// their call rates against cfg's stated figures.
func callRates(t *testing.T, cfg lease.Config, watch bool) {
	// A watching follower claims 20 times less often: more of them make
	// as many draws of jitter.
	holders, followers := 20, 2
	if watch {
		followers = 20
	}
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		times := &callTimes{Store: mem, extend: make(map[string]*callSpan), claims: make(map[string]*callSpan)}
		store := followerStore(watch, mem, times)
		cfg.Store = store
		want := cfg.Timing()
		var trs []*lease.Tracker
		for i := range holders {
			tr := startTimed(t, cfg, store, fmt.Sprintf("l%d", i), fmt.Sprintf("h%d", i))
			awaitStatus(tr, lease.Held)
			trs = append(trs, tr)
		}
		for i := range followers {
			tr := startTimed(t, cfg, store, "l0", fmt.Sprintf("f%d", i))
			awaitStatus(tr, lease.NotHeld)
			trs = append(trs, tr)
		}
		time.Sleep(200 * cfg.Duration)
		for _, tr := range trs {
			require.NoError(t, tr.Close())
		}
		times.mu.Lock()
		defer times.mu.Unlock()
		for i := range holders {
			require.Equal(t, 1, times.claims[fmt.Sprintf("h%d", i)].n, "one term each")
		}
		renew := 1000 * perSecond(times.extend) // per 1,000 leases
		claim := perSecond(times.claims)        // the holders' first claims count nothing
		t.Logf("renewals %.2f/s per 1,000 leases, stated %.2f; claims %.3f/s per follower, stated %.3f",
			renew, want.RenewRate, claim, want.ClaimRate)
		// Without jitter the rates are exact; with it they are means
		// over thousands of draws, which lie far within 0.3 %.
		eps := 1e-9
		if jitterOf(cfg) > 0 {
			eps = 0.003
		}
		assert.InEpsilon(t, want.RenewRate, renew, eps)
		assert.InEpsilon(t, want.ClaimRate, claim, eps)
	})
}

// The clock-rate difference Timing states is the bound at which promises
// begin to overlap: a holder's clock slower by 2 % more than it overlaps
// a successor, 2 % less does not (see TestClockRateBound).
func TestTimingClockDriftIsTheOverlapBound(t *testing.T) {
	for _, s := range timingSettings {
		drift := s.cfg.Timing().ClockDrift
		for _, tc := range []struct {
			slower  float64
			overlap bool
		}{{drift * 1.02, true}, {drift * 0.98, false}} {
			t.Run(fmt.Sprintf("%s/slower=%.2f%%", s.name, 100*tc.slower), func(t *testing.T) {
				assert.Equal(t, tc.overlap, overlapAtTakeover(t, s.cfg.Duration, s.cfg.Margin, 1-tc.slower))
			})
		}
	}
}

// watchingStore is a Store that is a ReleaseWatcher, for Timing.
type watchingStore struct{ leasestore.Store }

func (watchingStore) WatchRelease(context.Context, *leasestore.HeldError) <-chan error { return nil }

func TestTimingFigures(t *testing.T) {
	for _, tc := range []struct {
		cfg  lease.Config
		want lease.Timing
	}{
		{lease.Config{Duration: 2 * time.Second}, lease.Timing{
			Outage: 1900 * time.Millisecond, CrashTakeover: 4200 * time.Millisecond,
			GracefulTakeover: 200 * time.Millisecond, ClockDrift: 0.05,
			RenewRate: 1000 / (1.9 * 0.95), ClaimRate: 1 / (0.2 * 0.95),
		}},
		{lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}, lease.Timing{
			Outage: 9 * time.Second, CrashTakeover: 21 * time.Second,
			GracefulTakeover: time.Second, ClockDrift: 0.1,
			RenewRate: 1000 / (9 * 0.95), ClaimRate: 1 / 0.95,
		}},
		{lease.WithoutJitterForTest(lease.Config{Duration: 2 * time.Second, ClaimInterval: 50 * time.Millisecond}), lease.Timing{
			Outage: 1900 * time.Millisecond, CrashTakeover: 4050 * time.Millisecond,
			GracefulTakeover: 50 * time.Millisecond, ClockDrift: 0.05,
			RenewRate: 1000 / 1.9, ClaimRate: 20,
		}},
		// A follower that waits on a watch: woken within ClaimInterval/10,
		// capped at 1ms, and claiming once a term, 2×Duration.
		{lease.Config{Duration: 2 * time.Second, Store: watchingStore{}}, lease.Timing{
			Outage: 1900 * time.Millisecond, CrashTakeover: 4001 * time.Millisecond,
			GracefulTakeover: time.Millisecond, ClockDrift: 0.05,
			RenewRate: 1000 / (1.9 * 0.95), ClaimRate: 1 / (4 * 0.95),
		}},
		{lease.Config{Duration: 200 * time.Millisecond, Store: watchingStore{}}, lease.Timing{
			Outage: 190 * time.Millisecond, CrashTakeover: 401 * time.Millisecond,
			GracefulTakeover: time.Millisecond, ClockDrift: 0.05,
			RenewRate: 1000 / (0.19 * 0.95), ClaimRate: 1 / (0.4 * 0.95),
		}},
		{lease.WithoutJitterForTest(lease.Config{Duration: 2 * time.Second, Store: watchingStore{}}), lease.Timing{
			Outage: 1900 * time.Millisecond, CrashTakeover: 4 * time.Second,
			GracefulTakeover: 0, ClockDrift: 0.05,
			RenewRate: 1000 / 1.9, ClaimRate: 0.25,
		}},
	} {
		got := tc.cfg.Timing()
		assert.Equal(t, tc.want.Outage, got.Outage)
		assert.Equal(t, tc.want.CrashTakeover, got.CrashTakeover)
		assert.Equal(t, tc.want.GracefulTakeover, got.GracefulTakeover)
		assert.InDelta(t, tc.want.ClockDrift, got.ClockDrift, 1e-12)
		assert.InEpsilon(t, tc.want.RenewRate, got.RenewRate, 1e-9)
		assert.InEpsilon(t, tc.want.ClaimRate, got.ClaimRate, 1e-9)
	}
	// RenewFraction 0.3 of a 3.8s promise: the tracker's 1.14s, to its
	// truncated nanosecond.
	got := lease.Config{Duration: 2 * time.Second, RenewFraction: 0.3}.Timing()
	assert.InDelta(t, float64(2660*time.Millisecond), float64(got.Outage), 1)
	assert.Equal(t, lease.Timing{}, lease.Config{Duration: 2 * time.Second, Margin: 3 * time.Second}.Timing(), "invalid")
	assert.Equal(t, lease.Timing{}, lease.Config{}.Timing(), "no Duration")
	assert.Equal(t, "tolerates a store outage of 2.66s before answering Unknown; "+
		"a crash takeover takes at most 4.2s, a graceful one at most 200ms; "+
		"tolerates a clock 5% slower than the store's; "+
		"1,000 held leases cost 923 renewal calls/s, a waiting follower 5.26 claim calls/s", got.String())
}
