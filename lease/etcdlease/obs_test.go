package etcdlease_test

// What the stores tell: StoreReport's counts and WithLogger's records, on
// real etcd.

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// proxiedClient returns a client of m through its link, which the test
// can refuse, reconnecting promptly once it is healed.
func proxiedClient(t *testing.T, m *etcdtest.Member) (*etcdtest.Link, *clientv3.Client) {
	return m.Link(), newClientWith(t, promptRedial, m.Link().Endpoints()...)
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Every call of Claim, Extend and Revoke is counted once, in the class of
// its answer: OK, definitive (held, not held), not sent (its ctx ended
// first) and ambiguous (etcd cut off: the call timed out).
func TestStoreReportCountsEachCallByClass(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		toEtcd, cli := proxiedClient(t, etcdtest.Start(t))
		store := kind.make(t, cli, "/report/", 10*time.Second)
		s := store.(leasestore.Reporter)
		require.Equal(t, leasestore.Report{}, s.StoreReport(), "nothing yet")
		ctx := testCtx(t)

		g, err := store.Claim(ctx, "x", "a", 10*time.Second)
		require.NoError(t, err)
		_, err = store.Claim(ctx, "x", "b", 10*time.Second)
		require.ErrorIs(t, err, leasestore.ErrHeld)
		_, err = store.Extend(ctx, g, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, store.Revoke(ctx, g))
		require.ErrorIs(t, store.Revoke(ctx, g), leasestore.ErrNotHeld)
		_, err = store.Extend(ctx, g, 10*time.Second)
		require.ErrorIs(t, err, leasestore.ErrNotHeld)

		_, err = store.Claim(cancelledCtx(), "y", "a", 10*time.Second)
		require.ErrorIs(t, err, leasestore.ErrNotSent)
		g, err = store.Claim(ctx, "y", "a", 10*time.Second)
		require.NoError(t, err)
		require.ErrorIs(t, store.Revoke(cancelledCtx(), g), leasestore.ErrNotSent)

		toEtcd.Refuse()
		_, err = store.Claim(shortCtx(t), "z", "a", 10*time.Second)
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed)

		require.Equal(t, leasestore.Report{
			Claim:  leasestore.Calls{OK: 2, Definitive: 1, NotSent: 1, Ambiguous: 1},
			Extend: leasestore.Calls{OK: 1, Definitive: 1},
			Revoke: leasestore.Calls{OK: 1, Definitive: 1, NotSent: 1},
		}, s.StoreReport())
	})
}

// Calls that wait out a store's call slots fail with ErrOverCapacity and
// count as not sent — a SessionStore's claims too, queued for a batch
// while its sender waits for a slot (before, they matched only
// leasestore.ErrNotSent). They are counted once, in the StoreReport, and never
// logged: no record per call, and no count per interval either (before
// round 4, one record per interval, written by a timer that could fire
// after Close).
func TestOverCapacityIsCountedNotSentNotLogged(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	for _, kind := range []struct {
		name string
		make func(t *testing.T, opts ...etcdlease.Option) (leasestore.Store, func() (release func()))
	}{
		{"Store", func(t *testing.T, opts ...etcdlease.Option) (leasestore.Store, func() func()) {
			s := newEtcdStore(t, cli, "/overcap/Store/", opts...)
			return s, func() func() { return etcdlease.HoldStoreSlot(s) }
		}},
		{"SessionStore", func(t *testing.T, opts ...etcdlease.Option) (leasestore.Store, func() func()) {
			s := newSessionStore(t, cli, "/overcap/SessionStore/", time.Minute, opts...)
			return s, func() func() { return etcdlease.HoldSlot(s) }
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			clk := testclock.NewClock(time.Now())
			logs := logtest.New()
			store, hold := kind.make(t, etcdlease.WithClock(clk), etcdlease.WithLogger(logs.Logger()), etcdlease.WithMaxInFlight(1))
			g, err := store.Claim(testCtx(t), "held", "a", time.Minute)
			require.NoError(t, err)
			release := hold()

			const claims = 3
			for i := range claims {
				_, err := store.Claim(shortCtx(t), "x"+strconv.Itoa(i), "a", time.Minute)
				require.ErrorIs(t, err, etcdlease.ErrOverCapacity, "claim %d", i)
				require.ErrorIs(t, err, leasestore.ErrNotSent)
				require.NotErrorIs(t, err, leasestore.ErrUnconfirmed)
			}
			err = store.Revoke(shortCtx(t), g)
			require.ErrorIs(t, err, etcdlease.ErrOverCapacity)
			report := store.(leasestore.Reporter).StoreReport()
			require.Equal(t, leasestore.Calls{OK: 1, NotSent: claims}, report.Claim)
			require.Equal(t, leasestore.Calls{NotSent: 1}, report.Revoke)
			release()
			if c, ok := store.(interface{ Close() error }); ok {
				require.NoError(t, c.Close()) // a Store has no Close: its calls have returned
			}
			logs.Seal(t)
			clk.Advance(time.Minute) // no interval timer to fire a count
			for _, r := range logs.Records() {
				require.Equal(t, "etcd session granted", r.Message, "transitions only: %v", r)
			}
		})
	}
}

// A SessionStore logs each transition of its session once, and nothing
// per call: granted; unconfirmed when etcd cannot be reached (however many
// keep-alives then fail); confirmed again when it can, in the same raft
// term, with how long it was not; retired when a keep-alive is confirmed in
// another raft term (etcd restarted), its term moving to a new session;
// lost when etcd no longer has the lease; re-created by the next claim. A
// tracker renews throughout, and adds no record of the store's.
func TestSessionStoreLogsEachSessionTransitionOnce(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	toEtcd, cli := proxiedClient(t, etcd)
	logs := logtest.New()
	const d = time.Second
	s := newSessionStore(t, cli, "/sessionlog/", 3*2*d, etcdlease.WithLogger(logs.Logger())) // a keep-alive every 2s
	tr := newTracker(t, lease.Config{Store: s, Name: "singular", Holder: "c0", Duration: d, Margin: slowTimer})
	held := nextStatus(t, tr, 10*time.Second, isHeld, isNotHeld, "the claim")
	granted := logs.WaitMessage(t, "etcd session granted", 1)[0]
	require.Equal(t, slog.LevelInfo, granted.Level)
	require.Equal(t, "/sessionlog/", granted.Str("prefix"))
	require.Equal(t, (6 * time.Second).String(), granted.Str("ttl"))

	// The client is cut off from etcd until a keep-alive fails, then
	// reaches it again, well within the session's TTL.
	toEtcd.Refuse()
	down := logs.WaitMessage(t, "etcd session unconfirmed", 1)[0]
	require.Equal(t, slog.LevelWarn, down.Level)
	require.NotEmpty(t, down.Str("err"))
	require.NotEmpty(t, down.Str("until"))
	require.Equal(t, granted.Str("session"), down.Str("session"))
	toEtcd.Heal()
	up := logs.WaitMessage(t, "etcd session confirmed again", 1)[0]
	require.Equal(t, slog.LevelInfo, up.Level)
	unconfirmed, err := time.ParseDuration(up.Str("unconfirmed"))
	require.NoError(t, err)
	require.Positive(t, unconfirmed)
	require.Len(t, logs.Matching("etcd session unconfirmed"), 1, "once per outage, not per failed keep-alive")

	// etcd stops (raft first, so no lease expires meanwhile; the proxy cut
	// so that its open streams end at once) and restarts on its data, in a
	// new raft term: the session retires, and the term moves to a new one.
	etcd.Etcd().Server.HardStop()
	toEtcd.Refuse()
	etcd.Stop()
	logs.WaitMessage(t, "etcd session unconfirmed", 2)
	require.NoError(t, etcd.Restart())
	toEtcd.Heal()
	retired := logs.WaitMessage(t, "etcd session retired", 1)[0]
	require.Equal(t, slog.LevelInfo, retired.Level)
	require.Equal(t, granted.Str("session"), retired.Str("session"))
	require.Equal(t, "1", retired.Str("terms"))
	second := logs.WaitMessage(t, "etcd session granted", 2)[1]
	require.NotEqual(t, granted.Str("session"), second.Str("session"))
	after := nextStatus(t, tr, 10*time.Second, isHeld, isNotHeld, "the same term after the outage")
	require.Equal(t, held.Token, after.Token, "the same term, on the new session")
	id, err := strconv.ParseInt(second.Str("session"), 16, 64)
	require.NoError(t, err, "the session's etcd lease, in hex")

	// etcd drops the session's lease (as it would after an outage longer
	// than its TTL).
	_, err = newClient(t, etcd.Endpoints()...).Revoke(testCtx(t), clientv3.LeaseID(id))
	require.NoError(t, err)
	lost := logs.WaitMessage(t, "etcd session lost", 1)[0]
	require.Equal(t, slog.LevelWarn, lost.Level)
	require.Equal(t, second.Str("session"), lost.Str("session"))
	// The tracker claims again, on a new session.
	again := logs.WaitMessage(t, "etcd session re-created", 1)[0]
	require.Equal(t, second.Str("session"), again.Str("lost"))
	require.NotEqual(t, second.Str("session"), again.Str("session"))
	nextStatus(t, tr, 10*time.Second, isHeld, nil, "the claim on the new session")

	var msgs []string
	for _, r := range logs.Records() {
		msgs = append(msgs, r.Message)
	}
	require.Equal(t, []string{"etcd session granted", "etcd session unconfirmed", "etcd session confirmed again",
		"etcd session unconfirmed", "etcd session retired", "etcd session granted",
		"etcd session lost", "etcd session re-created"}, msgs, "transitions only")
	require.NotZero(t, s.StoreReport().Extend.OK, "the tracker renewed")
}

// Once Close has returned, neither store writes a record — a tracker on it
// closed first, releasing its term; a SessionStore's session goroutine
// (keep-alives, expiry rounds) ended with Close. The tracker's own log,
// sealed at its Close, stays quiet too.
func TestNothingLoggedAfterClose(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		cli := etcdtest.Start(t).Client()
		storeLogs, trackerLogs := logtest.New(), logtest.New()
		var store leasestore.Store
		const d = 500 * time.Millisecond
		if kind.name == "SessionStore" {
			s, err := etcdlease.NewSessionStore(cli, "/quiet/", 6*d, etcdlease.WithLogger(storeLogs.Logger()))
			require.NoError(t, err)
			store = s
		} else {
			store = newEtcdStore(t, cli, "/quiet/", etcdlease.WithLogger(storeLogs.Logger()))
		}
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "c0", Duration: d,
			Margin: d - d/5, ReleaseOnClose: true, Logger: trackerLogs.Logger()})
		require.NoError(t, err)
		held := nextStatus(t, tr, 10*time.Second, isHeld, isNotHeld, "the claim")
		nextStatus(t, tr, 10*time.Second, func(s lease.Status) bool { return s.Until.After(held.Until) }, isNotHeld, "a renewal")
		require.NoError(t, tr.Close())
		trackerLogs.Seal(t)
		if c, ok := store.(interface{ Close() error }); ok {
			require.NoError(t, c.Close())
		}
		storeLogs.Seal(t)
		calls := store.(leasestore.Reporter).StoreReport()
		require.Equal(t, uint64(1), calls.Revoke.OK, "released at Close")
		require.Zero(t, calls.InFlight)
		// The seals fail the test on any record until it ends; goleak
		// (TestMain) on any goroutine of the store's left running.
	})
}
