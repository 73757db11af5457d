//go:build linux

package etcdlease_test

// H2 and H3 of issue 24: a member that caught up by installing a snapshot
// answers linearizable reads with its old raft term (etcd's applySnapshot
// sets neither the raft term nor the applied index) until it applies an
// entry of the new raft term. With five voting members, a stale leader
// (cut off, still believing it leads) and such a member can share that old
// raft term: a
// keep-alive answered by the stale leader and a read answered by the
// member pass "answered in the same raft term" — the Store confirms a
// renewal the majority never made (H2), and a SessionStore takes the
// stale leader's "no such lease" of a session granted after it was cut
// off for a loss (H3: every term ErrNotLeader while its promise stands).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// switchKV is a clientv3.KV whose calls go to one client's KV, then,
// once switched, to another's: a client whose reads move from one member
// to another, as a client with every member's endpoint may.
type switchKV struct{ kv atomic.Pointer[clientv3.KV] }

func newSwitchKV(to *clientv3.Client) *switchKV {
	s := &switchKV{}
	s.switchTo(to)
	return s
}

func (s *switchKV) switchTo(cli *clientv3.Client) {
	kv := clientv3.NewKV(cli)
	s.kv.Store(&kv)
}

func (s *switchKV) target() clientv3.KV { return *s.kv.Load() }

func (s *switchKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return s.target().Put(ctx, key, val, opts...)
}

func (s *switchKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return s.target().Get(ctx, key, opts...)
}

func (s *switchKV) GetStream(ctx context.Context, key string, opts ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	return s.target().GetStream(ctx, key, opts...)
}

func (s *switchKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return s.target().Delete(ctx, key, opts...)
}

func (s *switchKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	return s.target().Compact(ctx, rev, opts...)
}

func (s *switchKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	return s.target().Do(ctx, op)
}

func (s *switchKV) Txn(ctx context.Context) clientv3.Txn { return s.target().Txn(ctx) }

// Snapshot settings of the H2 schedule: a member cut off for a few hundred
// writes catches up by installing a snapshot.
const (
	h2Members        = 5
	h2SnapshotCount  = 100
	h2CatchUpEntries = 10
	h2Writes         = 300
	// h2ElectionMs is long enough that the stale leader, once resumed,
	// believes it leads (until its check-quorum tick) for longer than the
	// session's keep-alive cadence (TTL/3 = 1s) plus its retry: the
	// session's keep-alive reaches it in every try, on a loaded machine
	// too. With the rig's 500ms, a try caught it about half the time.
	h2ElectionMs = 2000
	// h2SessionTTL is the session's TTL: etcd's least, 1.5 × h2ElectionMs.
	h2SessionTTL = 3 * time.Second
)

// With five members, a keep-alive answered by a stale leader and a read
// answered by a member that just installed a snapshot (its header still in
// the stale leader's raft term) confirm nothing: the Store's Extend is
// ambiguous, never a renewal (H2); the SessionStore neither renews its
// session on the stale leader's word nor takes its "no such lease" of a
// session granted after it was cut off for a loss (H3).
func TestSnapshotFollowersStaleRaftTermConfirmsNothing(t *testing.T) {
	// Each store's half counts once it has been reproduced in some try: on
	// a loaded machine a try often reaches one store's stale answer and
	// not the other's, and a rerun of both would mostly repeat the first.
	var storeSeen, sessionSeen bool
	retryStale(t, func(t *testing.T) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := etcdfault.Start(ctx, etcdfault.Config{
			Dir: t.TempDir(), Members: h2Members, TickMs: faultTickMs, ElectionMs: h2ElectionMs,
			SnapshotCount: h2SnapshotCount, SnapshotCatchUpEntries: h2CatchUpEntries, Logf: t.Logf,
		})
		require.NoError(t, err)
		defer c.Close() // last: after every client is closed
		x, err := c.Leader(ctx)
		require.NoError(t, err)
		b, m := (x+1)%h2Members, (x+2)%h2Members // the lagging member, and one of the majority
		client := func(i int) *clientv3.Client {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.ClientURL(i)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() { cli.Close() })
			return cli
		}
		cliB, cliM := client(b), client(m)

		// The Store's keep-alives reach x; its reads and transactions go
		// to m, and to b once b has caught up. It claims while x leads,
		// so x renews its etcd lease.
		storeKV := newSwitchKV(cliM)
		mixS := client(x)
		mixS.KV = storeKV
		s, err := etcdlease.NewStore(mixS, "/s/")
		require.NoError(t, err)
		g, err := s.Claim(ctx, "x", "h", 20*time.Second)
		require.NoError(t, err)

		// b falls behind past every member's compacted log.
		c.Isolate(b)
		for i := range h2Writes {
			_, err := cliM.Put(ctx, fmt.Sprintf("/fill/%04d", i), "x")
			require.NoError(t, err)
		}
		// x is cut off and paused; the majority elects another.
		c.Isolate(x)
		c.HoldClients(x)
		require.NoError(t, c.Pause(x))
		for {
			l, err := c.LeaderSeenBy(ctx, m)
			if err == nil && l >= 0 && l != x {
				break
			}
			require.NoError(t, ctx.Err(), "the majority elects a new leader")
			pass(ctx, 20*time.Millisecond)
		}
		// A session x never hears of: its keep-alive stream is opened on
		// x's connection, everything else goes to the majority.
		sessKV := newSwitchKV(cliM)
		mixSS := client(x)
		mixSS.KV, mixSS.Lease, mixSS.Watcher = sessKV, clientv3.NewLease(cliM), clientv3.NewWatcher(cliM)
		ss, err := etcdlease.NewSessionStore(mixSS, "/ss/", h2SessionTTL, etcdlease.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
		require.NoError(t, err)
		defer ss.Close()
		h := holdSession(ctx, t, ss, cliM)
		defer h.stop()
		resp, err := cliM.Get(ctx, "/ss/y")
		require.NoError(t, err)

		// b heals toward the majority, not x: it installs a snapshot.
		// Nothing is written after that.
		for j := range h2Members {
			if j != x && j != b {
				c.Heal(b, j)
				c.Heal(j, b)
			}
		}
		current := resp.Header.RaftTerm
		var bRaftTerm uint64
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); pass(ctx, 50*time.Millisecond) {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			r, err := cliB.Get(cctx, "/ss/y")
			ccancel()
			if err == nil && len(r.Kvs) == 1 {
				bRaftTerm = r.Header.RaftTerm
				break
			}
		}
		t.Logf("m%d caught up: it answers in raft term %d, the majority's is %d", b, bRaftTerm, current)
		if bRaftTerm == 0 || bRaftTerm >= current {
			c.HealAll()
			t.Logf("m%d did not answer in a stale raft term (no snapshot installed, or an entry applied since)", b)
			return false
		}
		storeKV.switchTo(cliB)
		sessKV.switchTo(cliB)

		// x resumes, still cut off: it believes it leads until its next
		// election timeout, and answers keep-alives from its own lessor.
		pass(ctx, 3*faultTickMs*time.Millisecond)
		require.NoError(t, c.Resume(x))
		pass(ctx, 3*faultTickMs*time.Millisecond)
		c.ReleaseClients(x)

		var confirmed, unconfirmed int
		for end := time.Now().Add(h2ElectionMs*time.Millisecond + time.Second); time.Now().Before(end); {
			cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
			ng, err := s.Extend(cctx, g, 20*time.Second)
			ccancel()
			switch {
			case err == nil:
				confirmed++
				t.Errorf("a keep-alive answered by the stale leader m%d was confirmed by m%d's snapshot raft term (Duration %v)", x, b, ng.Duration)
			case errors.Is(err, etcdlease.ErrRaftTermChanged):
				unconfirmed++
				require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
			}
			require.NotErrorIs(t, err, leasestore.ErrNotHeld)
			pass(ctx, 20*time.Millisecond)
		}
		h.check(t, "a stale leader's \"no such lease\" and a snapshot's raft term")
		// The premise: the majority kept the session's key all along.
		if r, err := cliM.Get(ctx, "/ss/y"); assert.NoError(t, err) {
			assert.Len(t, r.Kvs, 1, "the session's key is still in etcd")
		}
		c.HealAll()
		t.Logf("Store: %d keep-alives answered by the stale leader left unconfirmed, %d confirmed; SessionStore: a stale answer seen: %v",
			unconfirmed, confirmed, h.stale.Load())
		storeSeen = storeSeen || confirmed+unconfirmed > 0
		sessionSeen = sessionSeen || h.stale.Load() || h.notHeld.Load() != nil
		return storeSeen && sessionSeen || t.Failed()
	})
}

// testWriter writes the store's log records to the test's log, shown when
// a try fails. The store is closed before the test ends.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }
