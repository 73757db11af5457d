package etcdlease

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// The term table's rules, without etcd: time and the session's promise
// are inputs.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	tableTTL = 6 * time.Second
	tableD   = 2 * time.Second // what the holder asks for
	sessID   = 0x51
)

// confirmedUntil is the promise of a session whose latest keep-alive,
// sent at sent, was confirmed.
func confirmedUntil(sent time.Time) promise {
	return promise{id: sessID, ttl: tableTTL, until: sent.Add(tableTTL)}
}

// claimed returns a table holding one live term of "x" (token 10), granted
// at t0 for tableD on a session confirmed at t0.
func claimed(t *testing.T) (*termTable, *term, leasestore.Grant) {
	t.Helper()
	tt := newTermTable()
	granted, err := tt.record("x", "a", 10, confirmedUntil(t0), t0, tableD)
	require.NoError(t, err)
	require.Equal(t, tableD, granted)
	return &tt, tt.terms["x"], leasestore.Grant{Name: "x", Holder: "a", Token: 10}
}

func requireOver(t *testing.T, err error, holder string) {
	t.Helper()
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Equal(t, "x", nh.Name)
	require.EqualValues(t, 10, nh.Token)
	require.Equal(t, holder, nh.Holder)
}

func requireAmbiguous(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.False(t, errors.Is(err, leasestore.ErrNotHeld), "want ambiguous, got %v", err)
}

// The founding incident, in the store: while the session is unconfirmed,
// a term whose grant ran out is neither ended by Extend nor by the expiry,
// however long the outage; when etcd answers again, the holder that kept
// asking gets the same term back.
func TestTermTableOutageEndsNothing(t *testing.T) {
	tt, term, g := claimed(t)
	down := confirmedUntil(t0)
	down.err = errors.New("keep-alive not answered in time")
	for _, at := range []time.Duration{time.Second, tableD, tableTTL, 10 * tableTTL} {
		now := t0.Add(at)
		_, err := tt.renew(term, g, tableD, now, down)
		requireAmbiguous(t, err)
		require.Empty(t, tt.expired(now, down), "expired during the outage at +%v", at)
		require.Equal(t, termLive, term.state)
	}

	// etcd answers again at back: the keep-alive sent then is confirmed.
	back := t0.Add(10*tableTTL + time.Second)
	up := confirmedUntil(back)
	up.reachable = back
	granted, err := tt.renew(term, g, tableD, back.Add(100*time.Millisecond), up)
	require.NoError(t, err, "the same term goes on")
	require.Equal(t, tableD, granted)
}

// After an outage, a holder that stopped asking during it gets its whole
// asked duration from etcd's return before its term counts as abandoned.
func TestTermTableAbandonedOnlyWhileReachable(t *testing.T) {
	tt, term, g := claimed(t)
	back := t0.Add(time.Minute) // etcd was down from t0 + 1 s until now
	up := confirmedUntil(back)
	up.reachable = back
	require.Empty(t, tt.expired(back.Add(tableD-time.Millisecond), up), "abandoned before its holder could ask again")
	due := tt.expired(back.Add(tableD), up)
	require.Len(t, due, 1)
	require.Equal(t, termExpired, term.state)
	_, err := tt.renew(term, g, tableD, back.Add(tableD), up)
	requireOver(t, err, "")
}

// While the store can reach etcd, a term not extended within its grant is
// over: Extend says so, and the expiry takes its key.
func TestTermTableUnextendedTermIsAbandoned(t *testing.T) {
	tt, term, g := claimed(t)
	up := confirmedUntil(t0.Add(tableD))
	_, err := tt.renew(term, g, tableD, t0.Add(tableD), up)
	requireOver(t, err, "")
	require.Equal(t, termExpired, term.state)
	require.Len(t, tt.expired(t0.Add(tableD), up), 1, "the key is to be deleted")
}

// A grant never reaches past the session's confirmed promise, and a
// shorter Extend does not cut an earlier promise short.
func TestTermTableGrantsWithinThePromise(t *testing.T) {
	tt, term, g := claimed(t)
	p := confirmedUntil(t0)
	granted, err := tt.renew(term, g, 10*time.Second, t0.Add(time.Second), p)
	require.NoError(t, err)
	require.Equal(t, tableTTL-time.Second, granted, "no further than the keep-alive's send time + TTL")
	granted, err = tt.renew(term, g, time.Second, t0.Add(time.Second), p)
	require.NoError(t, err)
	require.Equal(t, time.Second, granted)
	require.Equal(t, t0.Add(tableTTL), term.expires, "the furthest grant stands")

	p.until = t0.Add(time.Second) // no keep-alive confirmed since
	_, err = tt.renew(term, g, time.Second, t0.Add(time.Second), p)
	requireAmbiguous(t, err)
}

// etcd's word ends a term: its key deleted or created again after it
// began, as the watch saw (naming the new holder), or its session lost.
func TestTermTableEtcdEndsTerms(t *testing.T) {
	p := confirmedUntil(t0)
	now := t0.Add(time.Second)
	t.Run("key created again", func(t *testing.T) {
		tt, term, g := claimed(t)
		lost := tt.lostChannel(g)
		tt.apply([]keyEvent{
			{name: "x", deleted: true, mod: 11},
			{name: "x", create: 12, mod: 12, lease: 0x77, holder: "b", isCreated: true},
		}, sessID, now)
		require.Equal(t, termOver, term.state)
		_, err := tt.renew(term, g, tableD, now, p)
		requireOver(t, err, "b")
		select {
		case <-lost:
		default:
			t.Fatal("Lost stayed open")
		}
	})
	t.Run("an event of the term itself", func(t *testing.T) {
		tt, term, _ := claimed(t)
		tt.apply([]keyEvent{{name: "x", create: 10, mod: 13, lease: sessID, holder: "a"}}, sessID, now)
		require.Equal(t, termLive, term.state, "a put that kept the create revision is the same term")
	})
	t.Run("resync without the key", func(t *testing.T) {
		tt, term, g := claimed(t)
		tt.reload(nil, 20, sessID, now)
		require.Equal(t, termOver, term.state)
		_, err := tt.renew(term, g, tableD, now, p)
		requireOver(t, err, "")
	})
	t.Run("session lost", func(t *testing.T) {
		tt, term, g := claimed(t)
		tt.endSession(sessID)
		_, err := tt.renew(term, g, tableD, now, promise{})
		requireOver(t, err, "")
	})
	t.Run("seen ended before it was recorded", func(t *testing.T) {
		tt := newTermTable()
		tt.apply([]keyEvent{{name: "y", deleted: true, mod: 15}}, sessID, now)
		_, err := tt.record("y", "a", 14, p, t0, tableD)
		requireAmbiguous(t, err)
		require.Equal(t, termOver, tt.terms["y"].state)
	})
}

// A key on our session that no term owns, and no call of ours is putting,
// is an orphan: recorded as expired, for the expiry to delete.
func TestTermTableOrphans(t *testing.T) {
	now := t0
	tt := newTermTable()
	tt.busy["busy"] = 1
	tt.apply([]keyEvent{
		{name: "orphan", create: 5, mod: 5, lease: sessID, holder: "a", isCreated: true},
		{name: "busy", create: 6, mod: 6, lease: sessID, holder: "a", isCreated: true},
		{name: "foreign", create: 7, mod: 7, lease: 0x99, holder: "b", isCreated: true},
	}, sessID, now)
	require.Equal(t, termExpired, tt.terms["orphan"].state)
	require.Nil(t, tt.terms["busy"], "a claim of ours may be putting it")
	require.Nil(t, tt.terms["foreign"], "another session's key")
	due := tt.expired(now, confirmedUntil(now))
	require.Len(t, due, 1)
	require.Equal(t, "orphan", due[0].name)
}

func TestTermStateString(t *testing.T) {
	require.Equal(t, "expired", termExpired.String())
	require.Equal(t, "termState(7)", termState(7).String())
}
