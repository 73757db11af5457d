package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

// An outage never ends a term by itself. etcd is stopped for longer than
// any grant (the session's TTL, and a Store term's etcd lease) and then
// restarted on the same data: throughout, every tracker answers only Held
// or ErrRenewalFailed (Unknown once its promise ran out) — never "not
// leader" — and afterwards each holds the SAME token, as nobody else could
// claim its key. On the SessionStore before round 3 the trackers answered
// ErrNotLeader once the term's grant ran out ("term not extended within
// its grant"), although etcd, when it returned, still had every key.
func TestOutageNeverEndsATerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, testOutageNeverEndsATerm)
}

func testOutageNeverEndsATerm(t *testing.T, kind storeKind) {
	const d = 500 * time.Millisecond // claims for 1 s; a SessionStore of TTL 3 s
	const names = 3
	etcd := etcdtest.Start(t)
	// The client reaches etcd through the member's link, refused when etcd
	// stops: a stopping member's gRPC server otherwise waits for the
	// client's open streams for seconds (a crashed process would not).
	// etcd gives its leases TTL + an election timeout after a restart: a
	// term whose etcd lease is not renewed in that time is over, by etcd's
	// word. grpc's default reconnect backoff (1 s growing to 120 s) would
	// often miss a Store's 1 s lease, so the client reconnects promptly.
	toEtcd := etcd.Link()
	cli := newClientWith(t, promptRedial, toEtcd.Endpoints()...)
	store := kind.make(t, cli, "/outage/", 2*d)
	trackers := make([]*lease.Tracker, names)
	tokens := make([]uint64, names)
	for i := range trackers {
		trackers[i] = newTracker(t, lease.Config{Store: store, Name: fmt.Sprintf("app-%d", i), Holder: "c0",
			Duration: d, Margin: d - d/5})
		tokens[i] = nextStatus(t, trackers[i], 10*time.Second, isHeld, isNotHeld, "the claim").Token
	}

	// check answers one tracker's check: it fails the test on a definitive
	// answer, and says whether the tracker holds the lease.
	check := func(i int, during string) lease.Status {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := trackers[i].Check(ctx, 0)
		switch {
		case errors.Is(err, lease.ErrNotLeader) || st.State == lease.NotHeld:
			t.Fatalf("%s: tracker %d answered %v, %v: an outage is not a loss", during, i, st.State, err)
		case err != nil && !errors.Is(err, lease.ErrRenewalFailed) && !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("%s: tracker %d answered %v, %v", during, i, st.State, err)
		case err == nil && st.State != lease.Held:
			t.Fatalf("%s: tracker %d answered %v without an error", during, i, st.State)
		}
		return st
	}

	// Raft stops first (no lease expires from then on), then the client's
	// connections are cut and the member closes. Check throughout, and
	// for outage once it is down.
	var stopped time.Time
	stopDone := make(chan struct{})
	etcd.Etcd().Server.HardStop()
	toEtcd.Refuse()
	go func() {
		defer close(stopDone)
		etcd.Stop()
	}()
	outage := 3*2*d + d // longer than the session's TTL and every grant
	var held, unsure int
	for stopped.IsZero() || time.Since(stopped) < outage {
		select {
		case <-stopDone:
			if stopped.IsZero() {
				stopped = time.Now()
			}
		default:
		}
		for i := range trackers {
			if check(i, "etcd down").State == lease.Held {
				held++
			} else {
				unsure++
			}
		}
		<-time.After(10 * time.Millisecond)
	}
	require.NotZero(t, unsure, "the outage outlasted every promise: some checks must have been Unknown")

	require.NoError(t, etcd.Restart())
	toEtcd.Heal()
	restarted := time.Now()
	for i := range trackers {
		for {
			st := check(i, "etcd restarted")
			if st.State == lease.Held {
				require.Equal(t, tokens[i], st.Token, "tracker %d: the term goes on with the same token", i)
				break
			}
			if time.Since(restarted) > 20*time.Second {
				t.Fatalf("tracker %d not Held 20s after etcd restarted", i)
			}
			<-time.After(10 * time.Millisecond)
		}
	}
	t.Logf("%d checks Held, %d ErrRenewalFailed during a %v outage; all %d Held again with their tokens %v after the restart",
		held, unsure, outage, names, time.Since(restarted).Round(time.Millisecond))
	// Nothing definitive was said at any time, between the checks either.
	for i, tr := range trackers {
		require.Zero(t, tr.Report().Losses, "tracker %d learned a loss", i)
	}
}
