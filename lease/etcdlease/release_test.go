package etcdlease_test

// The stores' leasestore.ReleaseWatcher: an etcd watch of the key wakes a
// waiting follower when the term it was refused for ends.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// refusedClaim claims name for "a" on store, then for "b", which is
// refused, and returns a's grant and b's refusal.
func refusedClaim(t *testing.T, store leasestore.Store, name string, d time.Duration) (leasestore.Grant, *leasestore.HeldError) {
	t.Helper()
	ctx := testCtx(t)
	g, err := store.Claim(ctx, name, "a", d)
	require.NoError(t, err)
	_, err = store.Claim(ctx, name, "b", d)
	var held *leasestore.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, leasestore.HeldError{Name: name, Holder: "a", Token: g.Token}, *held)
	return g, held
}

// released waits for ch's one answer, which must be nil (the term is over)
// and then the close.
func released(t *testing.T, ch <-chan error, why string) {
	t.Helper()
	select {
	case err, ok := <-ch:
		require.True(t, ok, "the release watch closed without an answer %s", why)
		require.NoError(t, err, "the release watch failed %s", why)
		_, more := <-ch
		require.False(t, more, "the release watch yielded twice %s", why)
	case <-time.After(10 * time.Second):
		t.Fatalf("the release watch yielded nothing 10s %s", why)
	}
}

// A Store's Extend beyond its etcd lease's TTL moves the key to a new etcd
// lease with a put that keeps the create revision: the watch sees the put,
// and it is not a release.
func TestWatchReleaseIgnoresTheTermsOwnPut(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newEtcdStore(t, cli, "/relet/")
	ctx := testCtx(t)
	g, held := refusedClaim(t, s, "x", time.Second)
	token := int64(held.Token)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, s.Key("x"), clientv3.WithRev(token+1))
	_, err := s.Extend(ctx, g, 10*time.Second) // longer than the TTL: a relet
	require.NoError(t, err)
	var put clientv3.WatchResponse
	for put = range wch {
		if len(put.Events) > 0 {
			break
		}
	}
	require.Len(t, put.Events, 1)
	ev := put.Events[0]
	require.Equal(t, mvccpb.PUT, ev.Type)
	require.Equal(t, token, ev.Kv.CreateRevision, "the relet keeps the term's create revision")

	one := make(chan clientv3.WatchResponse, 1)
	one <- put
	close(one)
	over, compacted, err := etcdlease.FollowRelease(one, token)
	require.False(t, over, "a put of the same term is not a release")
	require.False(t, compacted)
	require.Error(t, err, "the channel closed: the watch ended without an answer")

	// The store's own watch, from before the relet, yields at the revoke.
	ch := s.WatchRelease(ctx, held)
	require.NoError(t, s.Revoke(ctx, g))
	released(t, ch, "after the revoke")
}

// A watch whose start etcd has compacted away reads the key: the live term
// is watched on (and its revoke seen), an ended one is over at once.
func TestWatchReleaseAfterCompaction(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	forEachStore(t, func(t *testing.T, kind storeKind) {
		store := kind.make(t, cli, "/compact/"+kind.name+"/", time.Second)
		w := store.(leasestore.ReleaseWatcher)
		ctx := testCtx(t)
		compact := func() {
			t.Helper()
			for range 3 {
				_, err := cli.Put(ctx, "/compact/other", "x")
				require.NoError(t, err)
			}
			resp, err := cli.Put(ctx, "/compact/other", "x")
			require.NoError(t, err)
			_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
			require.NoError(t, err)
		}
		g, held := refusedClaim(t, store, "x", time.Second)
		compact()
		ch := w.WatchRelease(ctx, held)
		select {
		case err := <-ch:
			t.Fatalf("the watch of a live term yielded %v after compaction", err)
		default:
		}
		require.NoError(t, store.Revoke(ctx, g))
		released(t, ch, "after the revoke of a term watched across a compaction")

		// A later term, and the history of both compacted: the first
		// term's watch is over at once.
		c, err := store.Claim(ctx, "x", "c", time.Second)
		require.NoError(t, err)
		compact()
		released(t, w.WatchRelease(ctx, held), "for a term over before a compaction")
		require.NoError(t, store.Revoke(ctx, c))
	})
}

// The watch starts just after the revision at which the refused claim saw
// the term live: at etcd's current revision, where etcd's watch is in
// sync at once (a watch from the past waits for etcd's catch-up, every
// 100 ms), rather than replaying the key's history. A term no claim of
// the store was refused for is watched from its creation.
func TestWatchReleaseStartsAtTheRefusal(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	forEachStore(t, func(t *testing.T, kind storeKind) {
		store := kind.make(t, cli, "/from/"+kind.name+"/", time.Second)
		ctx := testCtx(t)
		g, err := store.Claim(ctx, "x", "a", time.Second)
		require.NoError(t, err)
		for range 3 {
			_, err := cli.Put(ctx, "/from/other", "x")
			require.NoError(t, err)
		}
		_, err = store.Claim(ctx, "x", "b", time.Second)
		var held *leasestore.HeldError
		require.ErrorAs(t, err, &held)
		now, err := cli.Get(ctx, "/from/other")
		require.NoError(t, err)
		require.Equal(t, now.Header.Revision+1, etcdlease.ReleaseWatchFrom(store, held))
		other := &leasestore.HeldError{Name: "y", Holder: "a", Token: g.Token}
		require.Equal(t, int64(g.Token)+1, etcdlease.ReleaseWatchFrom(store, other))
		require.Equal(t, int64(g.Token), etcdlease.ReleaseWatchFrom(store, &leasestore.HeldError{Name: "x", Holder: "a", Token: g.Token - 1}), "another term of x")
	})
}

// Close ends a SessionStore's watches: one whose ctx is live says so with
// an error that matches leasestore.ErrNotSent; so does one begun after Close.
func TestWatchReleaseEndsWithSessionStore(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	s := newSessionStore(t, cli, "/closing/", 3*time.Second)
	_, held := refusedClaim(t, s, "x", time.Second)
	ctx := testCtx(t)
	ch := s.WatchRelease(ctx, held)
	require.NoError(t, s.Close())
	for _, ch := range []<-chan error{ch, s.WatchRelease(ctx, held)} {
		select {
		case err := <-ch:
			require.ErrorIs(t, err, leasestore.ErrNotSent)
			var ce *leasestore.CallError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "x", ce.Name)
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end with the store")
		}
	}
}

// A watch of no term is refused at once.
func TestWatchReleaseNeedsATerm(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	forEachStore(t, func(t *testing.T, kind storeKind) {
		w := kind.make(t, cli, "/noterm/", time.Second).(leasestore.ReleaseWatcher)
		for _, held := range []*leasestore.HeldError{nil, {Name: "x", Holder: "a"}, {Holder: "a", Token: 3}} {
			err := <-w.WatchRelease(context.Background(), held)
			require.Error(t, err, "%+v", held)
		}
	})
}

// handOverConfig is a tracker of the lease "h" on its own store of kind,
// releasing on Close, polling every claimInterval when not woken.
func handOverConfig(t *testing.T, kind storeKind, cli *clientv3.Client, holder string, d, claimInterval time.Duration) lease.Config {
	return lease.Config{
		Store: kind.make(t, cli, "/handover/", 2*d), Name: "h", Holder: holder,
		Duration: d, ClaimInterval: claimInterval, ReleaseOnClose: true, Margin: slowTimer,
	}
}

// A waiting follower leads within milliseconds of the leader's release,
// woken by the watch: five hand-overs each well under the ClaimInterval
// (2 s) that a polling follower waits up to.
func TestGracefulHandOverWakesOnRelease(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		m := etcdtest.Start(t)
		const d, claimInterval = 2 * time.Second, 2 * time.Second
		leader := newTracker(t, handOverConfig(t, kind, m.Client(), "n0", d, claimInterval))
		nextStatus(t, leader, 10*time.Second, isHeld, isNotHeld, "n0 to lead")
		var gaps []time.Duration
		for i := 1; i <= 5; i++ {
			holder := fmt.Sprintf("n%d", i)
			f := newTracker(t, handOverConfig(t, kind, newClient(t, m.Endpoints()...), holder, d, claimInterval))
			nextStatus(t, f, 10*time.Second, isNotHeld, isHeld, holder+" to learn who leads")
			start := time.Now()
			require.NoError(t, leader.Close())
			st := nextStatus(t, f, 10*time.Second, isHeld, nil, holder+" to take over")
			gaps = append(gaps, time.Since(start))
			require.Equal(t, holder, st.Holder)
			leader = f
		}
		t.Logf("graceful hand-over gaps: %v", gaps)
		// A failure bound, not the expected time (a few ms): a follower
		// that polled every 2 s would miss it in nearly every run.
		require.Less(t, slices.Max(gaps), claimInterval/4, "gaps %v", gaps)
	})
}

// A follower waiting on the watch sends no claims but its fallback, once
// a term (2×Duration), where a polling one would claim every ClaimInterval
// (100 ms here: 30 claims in 3 s).
func TestWaitingFollowerIsQuiet(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		m := etcdtest.Start(t)
		const d = time.Second
		leader := newTracker(t, handOverConfig(t, kind, m.Client(), "a", d, 0))
		nextStatus(t, leader, 10*time.Second, isHeld, isNotHeld, "a to lead")
		cfg := handOverConfig(t, kind, newClient(t, m.Endpoints()...), "b", d, 0)
		f := newTracker(t, cfg)
		nextStatus(t, f, 10*time.Second, isNotHeld, isHeld, "b to learn who leads")
		before := cfg.Store.(leasestore.Reporter).StoreReport()
		const window = 3 * time.Second
		<-time.After(window) // a measurement window, not a wait for a goroutine
		after := cfg.Store.(leasestore.Reporter).StoreReport()
		calls := func(r leasestore.Report) uint64 {
			return r.Claim.OK + r.Claim.Definitive + r.Claim.NotSent + r.Claim.Ambiguous +
				r.Extend.OK + r.Extend.Definitive + r.Extend.NotSent + r.Extend.Ambiguous +
				r.Revoke.OK + r.Revoke.Definitive + r.Revoke.NotSent + r.Revoke.Ambiguous
		}
		n := calls(after) - calls(before)
		t.Logf("the waiting follower's calls in %v: %d", window, n)
		require.LessOrEqual(t, n, uint64(window/(2*d))+1, "calls in %v", window)
		st, _ := f.Current()
		require.Equal(t, lease.NotHeld, st.State)
	})
}

// recordCurrent records every status tr's Current reports, as node, until
// ctx ends; the returned func waits for that.
func recordCurrent(ctx context.Context, rec *history.Recorder, tr *lease.Tracker, node string) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			st, changed := tr.Current()
			rec.Record(history.Answer{Node: node, Call: history.CallCurrent, Status: st, Returned: time.Now()})
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return wg.Wait
}

// Through a restart of the one etcd member, a waiting follower's watch
// breaks or resumes, never says "over" falsely: there is never more than
// one leader, and after the leader's release the follower takes over.
func TestWatchReleaseAcrossMemberRestart(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		m := etcdtest.Start(t)
		const d = 2 * time.Second
		var rec history.Recorder
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := newTracker(t, handOverConfig(t, kind, m.Client(), "a", d, 0))
		waitA := recordCurrent(ctx, &rec, a, "a")
		nextStatus(t, a, 10*time.Second, isHeld, isNotHeld, "a to lead")
		b := newTracker(t, handOverConfig(t, kind, newClient(t, m.Endpoints()...), "b", d, 0))
		waitB := recordCurrent(ctx, &rec, b, "b")
		nextStatus(t, b, 10*time.Second, isNotHeld, isHeld, "b to learn who leads")

		require.NoError(t, m.Restart())
		// Someone leads again: a, or b after a's term lapsed.
		var leader, follower *lease.Tracker
		deadline := time.After(30 * time.Second)
		for leader == nil {
			stA, chA := a.Current()
			stB, chB := b.Current()
			switch {
			case stA.State == lease.Held:
				leader, follower = a, b
			case stB.State == lease.Held:
				leader, follower = b, a
			default:
				select {
				case <-chA:
				case <-chB:
				case <-deadline:
					t.Fatalf("nobody leads 30s after the restart: a %+v, b %+v", stA, stB)
				}
			}
		}
		nextStatus(t, follower, 20*time.Second, isNotHeld, nil, "the follower to learn who leads")
		asked := time.Now()
		require.NoError(t, leader.Close())
		rec.Record(history.Answer{Node: map[*lease.Tracker]string{a: "a", b: "b"}[leader], Call: history.CallStepDown, Asked: asked, Returned: time.Now()})
		nextStatus(t, follower, 20*time.Second, isHeld, nil, "the follower to take over")
		cancel()
		waitA()
		waitB()
		for _, v := range rec.Verify() {
			t.Error(v)
		}
	})
}

// A restart of the one etcd member under a watch of a live term ends it
// with an error or not at all, never with "over": the term is still
// refusing claims after the restart, and the watch's nil comes only with
// the revoke.
func TestWatchReleaseSaysNothingFalseAcrossRestart(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		m := etcdtest.Start(t)
		store := kind.make(t, m.Client(), "/restart/", 10*time.Second)
		g, held := refusedClaim(t, store, "x", 10*time.Second)
		ctx := testCtx(t)
		ch := store.(leasestore.ReleaseWatcher).WatchRelease(ctx, held)
		require.NoError(t, m.Restart())
		// The term lives on: a claim is refused (once the client is back).
		for {
			_, err := store.Claim(ctx, "x", "c", 10*time.Second)
			if errors.Is(err, leasestore.ErrHeld) {
				break
			}
			require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "a claim after the restart")
			require.NoError(t, ctx.Err())
		}
		select {
		case err := <-ch:
			require.Error(t, err, "the watch said the term was over while it was live")
			t.Logf("the watch ended with the restart: %v", err)
			return
		default:
		}
		for {
			err := store.Revoke(ctx, g)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "the revoke after the restart")
			require.NoError(t, ctx.Err())
		}
		select {
		case err := <-ch:
			if err != nil {
				t.Logf("the watch ended with the restart: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the watch, resumed after the restart, yielded nothing 10s after the revoke")
		}
	})
}

// A watch on a member that loses its quorum ends with an error (the watch
// requires etcd's leader), not with "over", and not in silence.
func TestWatchReleaseFailsWithoutALeader(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	ms := c.Members()
	cli := newClient(t, ms[0].Endpoints()...)
	store := newEtcdStore(t, cli, "/noleader/")
	_, held := refusedClaim(t, store, "x", 10*time.Second)
	ch := store.WatchRelease(testCtx(t), held)
	ms[1].Stop()
	ms[2].Stop()
	select {
	case err := <-ch:
		require.Error(t, err, "the watch said the term was over when its member lost the quorum")
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
		t.Logf("the watch ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch stayed silent 20s after its member lost the quorum")
	}
}
