//go:build linux

package etcdlease_test

// H1 of issue 24: a deposed raft leader's queued revokes. etcd's expiry
// loop (server.go, revokeExpiredLeases) checks leadership once per batch
// of expired leases — and not at all while the member still ticks — then
// proposes their revokes with at most 16 (maxPendingRevokes) in flight, each
// waiting up to the request timeout. A leader isolated just before the
// batch proposes the first 16 in its own term (they die with it); the rest
// wait for a slot, then, the member deposed, for a leader, and are
// forwarded to it and committed in its term, unconditionally. A holder
// that was cut off from etcd past its etcd lease's TTL, comes back, and
// renews that lease at the new leader (which promoted it on election) has
// its key deleted under its renewed promise.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	// deposedFillers is how many etcd leases the test renews on the
	// leader just before the holder's, so that they expire there just
	// before it, in the same expiry batch: the holder's lease is then
	// past the batch's first 16 revokes, the ones proposed while the
	// member still leads.
	deposedFillers = 24
	// maxPendingRevokes is etcd's bound on the revokes an expiry batch
	// has in flight (server.go).
	maxPendingRevokes = 16
	// deposedAttempts bounds the tries at the fault: on a loaded machine
	// the batch may be split by a lessor tick, or the member may step
	// down before it finds the leases expired. A try where the deposed
	// member's queued revokes did not commit proves nothing.
	deposedAttempts = 3
	// deposedHeal is how long after the holder's etcd lease expires on
	// the isolated leader it is healed: after a new leader was elected
	// and the holder renewed there, before the queued revokes (proposed a
	// request timeout, 5s + 2 × the election timeout, after the batch)
	// give up waiting for a leader.
	deposedHeal = 3 * time.Second
	// deposedRevokesWithin bounds the wait, after the heal, for the
	// deposed member's queued revokes to commit.
	deposedRevokesWithin = 15 * time.Second
)

// The deposed leader's queued revoke of the holder's etcd lease never
// leaves two nodes promised the lease at once (H1): the holder, cut off
// past its etcd lease's TTL and back, is not promised anything on that
// etcd lease, which some old leader may be about to revoke. The issue saw
// two holders in every attempt, on both stores, for 1.8–3.7s.
func TestFaultDeposedLeadersRevokeNeverTwoLeaders(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		r := startFaultRig(t, kind, oneMember)
		reproduced := false
		for try := 0; try < deposedAttempts && !reproduced; try++ {
			if try > 0 {
				t.Logf("the deposed leader's queued revokes did not commit; trying again")
			}
			reproduced = r.deposedLeader(ctx, t)
			r.settle(ctx)
		}
		r.judge(ctx, t, kind)
		if !reproduced {
			t.Fatalf("fault not reproduced in %d tries: no revoke queued by the deposed leader committed", deposedAttempts)
		}
	})
}

// deposedLeader runs H1's schedule once and says whether the fault
// happened: revokes the isolated leader queued committed after it was
// deposed.
func (r *faultRig) deposedLeader(ctx context.Context, t *testing.T) (reproduced bool) {
	t.Helper()
	holder := r.holder(ctx, t)
	mv := r.memberOf[holder]
	w := (mv + 1) % r.c.Size() // the leader to depose: not the holder's member
	require.NoError(t, r.c.MoveLeader(ctx, w), "making m%d the raft leader", w)
	// A store may move the key to a fresh etcd lease once it renews in
	// the new raft term: let it, so that the lease read below is the one
	// the key stays on.
	pass(ctx, 2*faultDuration)
	probe, err := clientv3.New(clientv3.Config{Endpoints: []string{r.c.ClientURL(w)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer probe.Close()
	get, err := probe.Get(ctx, faultPrefix+faultLease)
	require.NoError(t, err)
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != holder {
		t.Logf("the lease changed hands while m%d became the leader", w)
		return false
	}
	id := clientv3.LeaseID(get.Kvs[0].Lease)
	ttl, err := probe.TimeToLive(ctx, id)
	require.NoError(t, err)
	fillers := make([]clientv3.LeaseID, deposedFillers)
	for i := range fillers {
		gr, err := probe.Grant(ctx, ttl.GrantedTTL)
		require.NoError(t, err)
		fillers[i] = gr.ID
	}
	expiredBefore, err := r.c.LeasesExpired(ctx, w)
	require.NoError(t, err)

	// Cut the holder off from etcd, then renew the fillers and the
	// holder's etcd lease on w, in that order: w is to find them expired
	// in one batch, the holder's last.
	r.c.HoldClients(mv)
	pass(ctx, 100*time.Millisecond) // a keep-alive of the holder's in flight lands first
	renewed := time.Now()
	if !renewInOrder(ctx, t, probe, append(fillers, id)) {
		r.c.ReleaseClients(mv)
		return false
	}
	expiry := renewed.Add(time.Duration(ttl.GrantedTTL) * time.Second)
	t.Logf("%s (through m%d) cut off; its etcd lease %x and %d fillers expire on m%d at %s",
		holder, mv, id, len(fillers), w, expiry.Format("15:04:05.000"))

	// Isolate w just before: it still leads (and ticks) when its lessor
	// finds the leases expired.
	pass(ctx, time.Until(expiry.Add(-100*time.Millisecond)))
	r.c.Isolate(w)
	x := (mv + 2) % r.c.Size() // neither cut off nor held: it sees the election
	for {
		l, err := r.c.LeaderSeenBy(ctx, x)
		if err == nil && l >= 0 && l != w {
			t.Logf("m%d leads the majority", l)
			break
		}
		require.NoError(t, ctx.Err(), "the majority elects a new leader")
		pass(ctx, 20*time.Millisecond)
	}
	// The fillers live on at the new leader (which would otherwise expire
	// them itself first): the deposed member's revokes of them, which
	// commit whatever a store does, show that the fault happened.
	keeper, err := clientv3.New(clientv3.Config{Endpoints: []string{r.c.ClientURL(x)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer keeper.Close()
	kctx, stopKeeping := context.WithCancel(ctx)
	defer stopKeeping()
	for _, f := range fillers {
		_, err := keeper.KeepAlive(kctx, f)
		require.NoError(t, err)
	}
	// The holder comes back toward the new majority and renews there.
	r.c.ReleaseClients(mv)
	pass(ctx, time.Until(expiry.Add(deposedHeal)))
	r.c.HealAll()

	// Did the revokes w queued while it led commit after it was deposed?
	// The batch's first maxPendingRevokes were proposed in w's own term
	// and died with it.
	want := float64(len(fillers) - maxPendingRevokes)
	deadline := time.Now().Add(deposedRevokesWithin)
	for {
		n, err := r.c.LeasesExpired(ctx, w)
		if err == nil && n-expiredBefore >= want {
			t.Logf("m%d revoked %v expired etcd leases after it was deposed", w, n-expiredBefore)
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Logf("m%d revoked %v expired etcd leases (err %v); %v expected", w, n-expiredBefore, err, want)
			return false
		}
		pass(ctx, 100*time.Millisecond)
	}
}

// renewInOrder renews the etcd leases ids, in order, on one keep-alive
// stream of cli, sending them all before reading any answer: they are
// renewed within about a millisecond of each other, in that order. It
// says whether every one was renewed (the holder's may have moved).
func renewInOrder(ctx context.Context, t *testing.T, cli *clientv3.Client, ids []clientv3.LeaseID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(ctx)
	require.NoError(t, err)
	for _, id := range ids {
		require.NoError(t, stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}))
	}
	ok := true
	for range ids {
		resp, err := stream.Recv()
		require.NoError(t, err)
		if resp.TTL <= 0 {
			t.Logf("etcd lease %x was not renewed: gone", resp.ID)
			ok = false
		}
	}
	return ok
}
