//go:build linux

package etcdlease_test

// Jepsen-style fault tests on a real three-member etcd: each member is its
// own process (the test binary re-executed, see main_test.go), peer
// traffic goes through proxies that cut links per direction, and four
// nodes — each its own client (of one member, or in the stale-leader test
// keep-alives to one member and reads to another), its own store and a
// tracker — compete for one lease while faults are injected. Every check's answer is
// recorded and judged at the end by etcdfault.Check against etcd's own
// history of the key (see its doc for the rules).
//
// Default run, per store: one stale-leader fault (~15s; tried again, at
// most three times, if the stale leader renewed nothing) and one outage
// (~11s), each judged on every rule of etcdfault.Check (no two leaders at
// one instant, no "not leader" inside a promise, terms owned and ordered
// as etcd records them, writes inside their term, a fresh term within
// 3 × Duration of the heal) plus, for the outage, no "not leader" at all
// and the same term after. A longer run cycles through every kind of
// fault (stale leaders, partitions, one-way cuts both ways, crashes,
// pauses, outages) for COLDSTART_FAULT_DURATION per store (35s: about
// six faults), with COLDSTART_FAULT_SEED to replay a schedule.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
)

// Fault-test timing, the issue's: Duration 2s (trackers claim for 4s), a
// SessionStore session TTL of 4s (the claim's length: below the 3 × claim
// its doc advises for full-length grants, which only makes grants
// shorter), etcd's election timeout 500ms, so a paused leader is replaced
// within about a second, and a new leader extends every lease by 500ms.
const (
	faultDuration   = 2 * time.Second
	faultSessionTTL = 4 * time.Second
	faultTickMs     = 50
	faultElectionMs = 500
	faultNodes      = 4
	faultPrefix     = "/fault/"
	faultLease      = "singular"
	faultWrites     = "/fault-writes/"
	// stalePause is how long the stale leader is stopped: longer than an
	// election, and short enough that the member still has the holder's
	// etcd lease unexpired when it resumes (etcd holds back a renewal of
	// an expired lease until it is revoked). The pause starts just after
	// a renewal (afterRenewal), so the member's copy lasts a TTL (4s)
	// into it; an unaligned pause could rely on only 2/3 TTL (a renewal
	// every TTL/3), which the 3.4s pause exceeded, so it
	// reproduced the fault only in some rounds.
	stalePause = 3200 * time.Millisecond
	// staleHeal is how long after its resumption the stale leader stays
	// cut off: until the majority has expired its holder's session (the
	// election, then the TTL and the new leader's 500ms extension) and
	// another node has claimed, and the stale promise (up to 2 × Duration
	// from the renewal the stale leader answered) has run out.
	staleHeal = 5 * time.Second
	// faultOutage is how long every member is down in an outage: past
	// the longest grant either store gives (the claim, 4s), and past the
	// session's TTL.
	faultOutage = 5 * time.Second
)

// recoverWithin is the liveness bound: after a heal, some node holds a
// fresh term within 3 × Duration.
const recoverWithin = 3 * faultDuration

// faultRig is a cluster, its nodes and the workload observing them.
type faultRig struct {
	c        *etcdfault.Cluster
	nodes    []etcdfault.Node
	memberOf map[string]int // node → the member its keep-alives reach
	w        *etcdfault.Workload
}

// clientLayout is how a node's client reaches the members.
type clientLayout int

const (
	// oneMember: every call of a node goes to one member.
	oneMember clientLayout = iota
	// splitReads: a node's keep-alives (and grants and watches) go to
	// one member, its reads and transactions to the next, as a client
	// with every member's endpoint may spread them. Under a stale leader
	// the holder's keep-alives reach it and its reads the majority, in a
	// later raft term: only the raft-term comparison leaves them unconfirmed.
	splitReads
)

func (l clientLayout) String() string {
	if l == splitReads {
		return "split reads"
	}
	return "one member"
}

func startFaultRig(t *testing.T, kind storeKind, layout clientLayout) *faultRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdfault.Start(ctx, etcdfault.Config{
		Dir: t.TempDir(), TickMs: faultTickMs, ElectionMs: faultElectionMs, Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(c.Close) // last: after every client is closed
	r := &faultRig{c: c, memberOf: make(map[string]int)}
	for i := range faultNodes {
		name := fmt.Sprintf("n%d", i)
		m := i % c.Size()
		// No gRPC keep-alive: a member paused for seconds would have its
		// connections dropped and redialled with backoff; with none, the
		// connection simply stalls and resumes, as a stale leader needs.
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{c.ClientURL(m)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		})
		require.NoError(t, err)
		t.Cleanup(func() { cli.Close() })
		if layout == splitReads {
			reads, err := clientv3.New(clientv3.Config{
				Endpoints: []string{c.ClientURL((m + 1) % c.Size())}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			})
			require.NoError(t, err)
			t.Cleanup(func() { reads.Close() })
			cli.KV = clientv3.NewKV(reads)
		}
		tr := newTracker(t, lease.Config{
			Store: kind.make(t, cli, faultPrefix, faultSessionTTL/3), Name: faultLease, Holder: name,
			Duration: faultDuration, Margin: slowTimer,
		})
		r.nodes = append(r.nodes, etcdfault.Node{Name: name, Tracker: tr, Client: cli})
		r.memberOf[name] = m
	}
	r.w = etcdfault.Observe(r.nodes, etcdfault.WorkloadConfig{Key: faultPrefix + faultLease, WritePrefix: faultWrites})
	t.Cleanup(func() { r.w.Stop() }) // first: before the trackers close
	return r
}

// holder waits for some node to be promised the lease and returns it.
func (r *faultRig) holder(ctx context.Context, t *testing.T) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if name, _, ok := r.w.Holder(); ok {
			return name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no node held the lease: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// pass waits d of real time: faults are scheduled on etcd's clock, which
// is the wall clock.
func pass(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// staleLeader is the fault of issue 17: the raft leader that the holder's
// client talks to is paused and cut off from its peers, resumed still cut
// off (it believes it leads until its next election timeout, and answers
// keep-alives from its own lessor meanwhile), and healed only once the
// majority has expired the holder's etcd lease and given the key to
// another node. It says whether the fault happened: the member, resumed,
// still named itself the leader and renewed the holder's etcd lease.
func (r *faultRig) staleLeader(ctx context.Context, t *testing.T) (reproduced bool) {
	t.Helper()
	holder := r.holder(ctx, t)
	m := r.memberOf[holder]
	require.NoError(t, r.c.MoveLeader(ctx, m), "making %s's member the raft leader", holder)
	// Renewed in a new raft term, a store moves the key to a fresh etcd
	// lease (see TestFaultDeposedLeadersRevokeNeverTwoLeaders): let it,
	// so that the lease watched below is the one the key stays on.
	pass(ctx, 2*faultDuration)
	t.Logf("%s holds the lease through m%d, the raft leader", holder, m)
	probe, err := clientv3.New(clientv3.Config{Endpoints: []string{r.c.ClientURL(m)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer probe.Close()
	id := r.afterRenewal(ctx, t, probe, m) // a renewal by the new raft leader
	r.c.Isolate(m)
	// What clients send during the pause reaches the member after it
	// resumed and its raft ticked (on a real machine, a race between the
	// member's gRPC and raft goroutines): etcd then skips its leadership
	// check for the keep-alive in flight.
	r.c.HoldClients(m)
	require.NoError(t, r.c.Pause(m))
	pass(ctx, stalePause)
	require.NoError(t, r.c.Resume(m)) // still cut off
	pass(ctx, 3*faultTickMs*time.Millisecond)
	r.c.ReleaseClients(m)
	start := time.Now()
	reproduced = r.staleRenewal(ctx, probe, m, id)
	pass(ctx, staleHeal-time.Since(start))
	r.c.HealAll()
	t.Logf("stale leader m%d renewed %s's etcd lease %x: %v", m, holder, id, reproduced)
	return reproduced
}

// staleRenewal watches member m, just resumed still cut off, for as long
// as it could lead (an election timeout and some): it says whether m named
// itself the leader and its lessor renewed etcd lease id (TimeToLive up to
// 2s or more: the pause left it less than a second).
func (r *faultRig) staleRenewal(ctx context.Context, probe *clientv3.Client, m int, id clientv3.LeaseID) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(3 * faultElectionMs * time.Millisecond); time.Now().Before(end); {
		if r.c.NamesItselfLeader(ctx, m) {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			resp, err := probe.TimeToLive(cctx, id)
			cancel()
			if err == nil && resp.TTL >= 2 && r.c.NamesItselfLeader(ctx, m) {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return false
}

// afterRenewal returns just after the holder's etcd lease (its session, or
// its term's lease), which it returns, was renewed on member m, the raft
// leader: polled through cli, a client of m, with TimeToLive, whose whole
// seconds go up only at a renewal. A pause that starts then leaves the
// member a full TTL before its own copy of the lease expires.
func (r *faultRig) afterRenewal(ctx context.Context, t *testing.T, cli *clientv3.Client, m int) clientv3.LeaseID {
	t.Helper()
	get, err := cli.Get(ctx, faultPrefix+faultLease)
	require.NoError(t, err)
	require.Len(t, get.Kvs, 1, "the lease key")
	id := clientv3.LeaseID(get.Kvs[0].Lease)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := int64(-1)
	for deadline := time.Now().Add(2 * faultDuration); time.Now().Before(deadline); {
		if resp, err := cli.TimeToLive(ctx, id); err == nil {
			if last >= 0 && resp.TTL > last {
				return id
			}
			last = resp.TTL
		}
		select {
		case <-ctx.Done():
			return id
		case <-tick.C:
		}
	}
	t.Logf("no renewal of the holder's etcd lease %x seen on m%d in %v; pausing anyway", id, m, 2*faultDuration)
	return id
}

// settle waits, after a heal, until some node holds a fresh term (at most
// the liveness bound, which the checker judges), then half a Duration
// more: what a node does once it hears of the heal is part of the history.
func (r *faultRig) settle(ctx context.Context) {
	r.w.AwaitFresh(ctx, time.Now(), recoverWithin)
	pass(ctx, faultDuration/2)
}

// judge stops the workload, reads etcd's history of the lease and the
// writes, and fails the test with every broken promise.
func (r *faultRig) judge(ctx context.Context, t *testing.T, kind storeKind) etcdfault.History {
	t.Helper()
	h := r.w.Stop()
	events := r.c.Events()
	admin, err := clientv3.New(clientv3.Config{
		Endpoints: []string{r.c.ClientURL(0), r.c.ClientURL(1), r.c.ClientURL(2)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	require.NoError(t, err)
	defer admin.Close()
	terms, err := etcdfault.ReadTerms(ctx, admin, faultPrefix+faultLease)
	require.NoError(t, err)
	applied, err := etcdfault.ReadApplied(ctx, admin, faultWrites)
	require.NoError(t, err)
	v := etcdfault.Check(h, terms, applied, etcdfault.Heals(events), recoverWithin)
	t.Logf("%s: %d fault events; %s", kind.name, len(events), v)
	t.Logf("timeline:\n%s", etcdfault.Timeline(h, events))
	if !v.OK() {
		t.Errorf("%s broke %d promises under faults (see VIOLATION lines above)", kind.name, len(v.Violations))
	}
	return h
}

// Under a stale etcd leader, no two trackers are ever promised the lease
// at one instant, no tracker says "not leader" while its own promise
// stands, terms are owned and ordered as etcd records them, and a tracker
// holds a fresh term within 3 × Duration of the heal. The issue saw
// SessionStore promise two holders at once for up to 1.5s. The nodes'
// reads reach another member than their keep-alives (splitReads), so the
// holder's renewals answered by the stale leader are read back at the
// majority in a later raft term. A fault that did not happen (the stale
// leader stepped down before the holder's keep-alive reached it, on a
// loaded machine) is tried again, at most staleAttempts times.
func TestFaultStaleLeaderNeverTwoLeaders(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := startFaultRig(t, kind, splitReads)
		reproduced := false
		for try := 0; try < staleAttempts && !reproduced; try++ {
			if try > 0 {
				t.Logf("the fault was not reproduced; trying again")
				r.settle(ctx)
			}
			reproduced = r.staleLeader(ctx, t)
			r.settle(ctx)
		}
		r.judge(ctx, t, kind)
		if !reproduced {
			t.Fatalf("fault not reproduced in %d tries: the isolated member never renewed the holder's etcd lease as a stale leader", staleAttempts)
		}
	})
}

// Through an etcd outage longer than any grant — every member killed,
// then restarted on its data — the holder never says "not leader" (it
// answers Held until its promise, then ErrRenewalFailed), and once etcd
// is back it holds the same term: nobody could claim while etcd was down,
// and a restarted etcd extends its leases. The issue saw SessionStore
// answer ErrNotLeader ~150 times through such an outage.
func TestFaultOutageIsNeverNotLeader(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r := startFaultRig(t, kind, oneMember)
		holder := r.holder(ctx, t)
		_, before, _ := r.w.Holder()
		pass(ctx, faultDuration/2)
		down := time.Now()
		r.outage(ctx, t, faultOutage)
		r.settle(ctx)
		h := r.judge(ctx, t, kind)
		var after *etcdfault.Answer
		for i, a := range h.Answers {
			if a.Node != holder || a.First.Before(down) {
				continue
			}
			if a.Class == etcdfault.AnswerNotLeader {
				t.Errorf("%s, holding term %d when etcd went down, answered ErrNotLeader %.3fs after: %v",
					holder, before.Token, a.First.Sub(down).Seconds(), a.Err)
			}
			if after == nil && a.Status.State == lease.Held && a.First.After(down.Add(faultOutage)) {
				after = &h.Answers[i]
			}
		}
		if after == nil {
			t.Errorf("%s never held the lease again after the outage", holder)
		} else if after.Status.Token != before.Token {
			t.Errorf("%s held term %d after the outage, not its term %d", holder, after.Status.Token, before.Token)
		}
	})
}

// The same promises under a random schedule of every fault the harness
// has, for COLDSTART_FAULT_DURATION per store (skipped when unset).
func TestFaultScheduleNeverTwoLeaders(t *testing.T) {
	total, err := time.ParseDuration(os.Getenv("COLDSTART_FAULT_DURATION"))
	if err != nil || total <= 0 {
		t.Skip("set COLDSTART_FAULT_DURATION (e.g. 35s) to run random faults for that long per store")
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("COLDSTART_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("COLDSTART_FAULT_SEED=%d", seed)
	forEachStore(t, func(t *testing.T, kind storeKind) {
		ctx, cancel := context.WithTimeout(context.Background(), total+3*time.Minute)
		defer cancel()
		rng := rand.New(rand.NewPCG(seed, 17))
		r := startFaultRig(t, kind, oneMember)
		end := time.Now().Add(total)
		var kinds []string
		for time.Now().Before(end) && ctx.Err() == nil {
			if len(kinds) == 0 {
				kinds = append(kinds, faultKinds...)
				rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			}
			t.Logf("fault: %s", kinds[0])
			r.randomFault(ctx, t, rng, kinds[0])
			kinds = kinds[1:]
			r.settle(ctx)
		}
		r.judge(ctx, t, kind)
	})
}

// faultKinds are the faults of a random schedule: each round of
// len(faultKinds) faults applies every kind once, in a random order.
var faultKinds = []string{"stale-leader", "partition", "one-way-out", "one-way-in", "crash", "pause", "outage"}

// randomFault applies one fault of the kind and heals it.
func (r *faultRig) randomFault(ctx context.Context, t *testing.T, rng *rand.Rand, kind string) {
	t.Helper()
	n := r.c.Size()
	hold := func() time.Duration { return time.Duration(1000+rng.IntN(6000)) * time.Millisecond }
	// target: the raft leader half the time (the interesting member), else
	// any member.
	target := func() int {
		if rng.IntN(2) == 0 {
			if l, err := r.c.Leader(ctx); err == nil {
				return l
			}
		}
		return rng.IntN(n)
	}
	switch kind {
	case "stale-leader":
		r.staleLeader(ctx, t)
	case "partition": // a member partitioned off
		m := target()
		r.c.Isolate(m)
		pass(ctx, hold())
		r.c.HealAll()
	case "one-way-out", "one-way-in": // a member cannot send to the others, or cannot hear them
		m := target()
		for j := range n {
			if j == m {
				continue
			}
			if kind == "one-way-out" {
				r.c.Cut(m, j)
			} else {
				r.c.Cut(j, m)
			}
		}
		pass(ctx, hold())
		r.c.HealAll()
	case "crash": // a crash, and a restart on the same data
		m := target()
		require.NoError(t, r.c.Kill(m))
		pass(ctx, hold())
		require.NoError(t, r.c.Restart(m))
	case "pause": // a VM frozen, a long GC
		m := target()
		require.NoError(t, r.c.Pause(m))
		pass(ctx, hold()/2)
		require.NoError(t, r.c.Resume(m))
	case "outage":
		r.outage(ctx, t, faultOutage)
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// outage kills every member, waits down, and restarts them all on their
// data.
func (r *faultRig) outage(ctx context.Context, t *testing.T, down time.Duration) {
	t.Helper()
	for i := range r.c.Size() {
		require.NoError(t, r.c.Kill(i))
	}
	pass(ctx, down)
	for i := range r.c.Size() {
		require.NoError(t, r.c.Restart(i))
	}
}
