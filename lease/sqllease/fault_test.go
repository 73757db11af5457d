package sqllease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
	"github.com/coldstart-go/coldstart/lease/sqllease"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/faultproxy"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/pgtest"
)

// The fault tests' timing: trackers of faultDuration claim rows of 1.25 s
// (2×Duration and a quarter); a fault lasts faultFor, longer than a row,
// so that the follower takes over while the leader cannot hear.
const (
	faultDuration = 500 * time.Millisecond
	faultFor      = 2500 * time.Millisecond
)

// node is one tracker of a fault test and the answers it gave.
type node struct {
	name string
	tr   *lease.Tracker

	mu      sync.Mutex
	states  map[lease.State]int
	renewal int // ErrRenewalFailed answers
	lost    int // ErrNotLeader answers
}

func (n *node) count(st lease.Status, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.states[st.State]++
	switch {
	case errors.Is(err, lease.ErrRenewalFailed):
		n.renewal++
	case errors.Is(err, lease.ErrNotLeader):
		n.lost++
	}
}

// scenario runs leader a (Store sa) and follower b (Store sb) on one lease:
// a holds it, then fault begins, and heal ends it faultFor later; both
// check every 10ms throughout, and the history checker judges every
// answer. It returns the nodes for the test's own assertions.
func scenario(t *testing.T, name string, sa, sb *sqllease.Store, fault func() (heal func())) (a, b *node) {
	t.Helper()
	start := func(holder string, s *sqllease.Store) *node {
		tr, err := lease.NewTracker(lease.Config{Store: s, Name: name, Holder: holder, Duration: faultDuration})
		if err != nil {
			t.Fatal(err)
		}
		return &node{name: holder, tr: tr, states: map[lease.State]int{}}
	}
	var rec history.Recorder
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	check := func(n *node) {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			asked := time.Now()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := n.tr.Check(cctx, 0)
			cancel()
			if ctx.Err() != nil {
				return
			}
			rec.Record(history.Answer{Lease: name, Node: n.name, Call: history.CallCheck, Status: st, Err: err,
				Asked: asked, Returned: time.Now()})
			n.count(st, err)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
	a = start("a", sa)
	awaitState(t, a.tr, lease.Held)
	b = start("b", sb)
	awaitState(t, b.tr, lease.NotHeld)
	wg.Add(2)
	go check(a)
	go check(b)
	<-time.After(200 * time.Millisecond)
	heal := fault()
	<-time.After(faultFor)
	heal()
	<-time.After(3 * faultDuration)
	stop()
	wg.Wait()
	a.tr.Close()
	b.tr.Close()
	for _, v := range rec.Verify() {
		t.Error(v)
	}
	t.Logf("a: %v, %d renewal failures, %d not-leader; b: %v", a.states, a.renewal, a.lost, b.states)
	return a, b
}

// awaitState follows tr's status until it is in state.
func awaitState(t testing.TB, tr *lease.Tracker, state lease.State) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		st, changed := tr.Current()
		if st.State == state {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("not %v within 20s (last %+v)", state, st)
		}
	}
}

// wantTakeover checks what a fault that cut the leader off must give: the
// leader's renewals failed ambiguously, and the follower took over.
func wantTakeover(t *testing.T, a, b *node) {
	t.Helper()
	if a.renewal == 0 {
		t.Errorf("the leader's renewals never failed ambiguously through the fault: %v", a.states)
	}
	if b.states[lease.Held] == 0 {
		t.Errorf("the follower never took over: %v", b.states)
	}
}

// pgPair returns two Stores on the package's Postgres: a's through a fault
// proxy, with application_name app so a test can find its backends.
func pgPair(t *testing.T, app string) (sa, sb *sqllease.Store, proxy *faultproxy.Proxy) {
	t.Helper()
	proxy, err := faultproxy.Listen(pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	sa = newStore(t, openDB(t, "pgx", pgtest.DSN(proxy.Addr(), "application_name="+app)), sqllease.Postgres)
	sb = newStore(t, openDB(t, "pgx", pgtest.DSN(pg.Addr(), "")), sqllease.Postgres)
	return sa, sb, proxy
}

func TestFaultPostgresBlackHoleIsNotNotLeader(t *testing.T) {
	t.Parallel()
	sa, sb, proxy := pgPair(t, "blackhole")
	a, b := scenario(t, unique(t, "blackhole"), sa, sb, func() func() {
		proxy.Set(faultproxy.BlackHole)
		return func() { proxy.Set(faultproxy.None) }
	})
	wantTakeover(t, a, b)
}

func TestFaultPostgresCutIsNotNotLeader(t *testing.T) {
	t.Parallel()
	sa, sb, proxy := pgPair(t, "cut")
	a, b := scenario(t, unique(t, "cut"), sa, sb, func() func() {
		proxy.Set(faultproxy.Cut)
		return func() { proxy.Set(faultproxy.None) }
	})
	wantTakeover(t, a, b)
}

// terminate terminates every backend whose application_name is app, every
// period, until the returned func is called; it returns how many.
func terminate(t *testing.T, app string, period time.Duration) (stop func() int64) {
	admin := openDB(t, "pgx", pgtest.DSN(pg.Addr(), ""))
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var k int64
			admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&k)
			n.Add(k)
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}()
	return func() int64 { cancel(); <-done; return n.Load() }
}

// Backends terminated (pg_terminate_backend) every 100ms, as an operator's
// script or a pooler's idle timeout would, mostly between statements: the
// driver dials again, and the leader keeps its lease. (Terminated every
// 5ms under load, most renewals die in flight and the lease is lost,
// safely: TestFaultPostgresStatementStalledByALock.)
func TestFaultPostgresTerminatedBackends(t *testing.T) {
	t.Parallel()
	sa, sb, _ := pgPair(t, "terminated")
	var terminated int64
	a, b := scenario(t, unique(t, "terminated"), sa, sb, func() func() {
		stop := terminate(t, "terminated", 100*time.Millisecond)
		return func() { terminated = stop() }
	})
	if terminated == 0 {
		t.Errorf("no backend of the leader's was terminated")
	}
	if a.lost != 0 || b.states[lease.Held] != 0 {
		t.Errorf("terminated backends cost the leader its lease: a %v, b %v", a.states, b.states)
	}
}

// A statement stalled by a row lock held elsewhere (an operator's open
// transaction) past a term, its backend terminated while it waits: the
// leader's renewal fails, the follower's claim waits too; nobody is
// promised what the row does not say.
func TestFaultPostgresStatementStalledByALock(t *testing.T) {
	t.Parallel()
	sa, sb, _ := pgPair(t, "stalled")
	admin := openDB(t, "pgx", pgtest.DSN(pg.Addr(), ""))
	name := unique(t, "stalled")
	a, _ := scenario(t, name, sa, sb, func() func() {
		tx, err := admin.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`SELECT 1 FROM coldstart_leases WHERE name = $1 FOR UPDATE`, name); err != nil {
			t.Fatal(err)
		}
		stop := terminate(t, "stalled", 5*time.Millisecond)
		return func() {
			if stop() == 0 {
				t.Errorf("no stalled backend of the leader's was terminated")
			}
			tx.Rollback()
		}
	})
	if a.renewal == 0 {
		t.Errorf("the leader's renewals never failed ambiguously while stalled: %v", a.states)
	}
}

// The server killed (every backend with it) and restarted on its data:
// not parallel, since every test shares the server.
func TestFaultPostgresServerKilledAndRestarted(t *testing.T) {
	sa, sb, _ := pgPair(t, "killed")
	a, _ := scenario(t, unique(t, "killed"), sa, sb, func() func() {
		pg.Kill()
		return func() {
			if err := pg.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if a.renewal == 0 {
		t.Errorf("the leader's renewals never failed ambiguously while the server was down: %v", a.states)
	}
}

// A writer holding SQLite's lock (BEGIN IMMEDIATE, as a long migration
// would) past a term: "database is locked" is ambiguous, never NotLeader.
func TestFaultSQLiteWriterHoldsTheLock(t *testing.T) {
	t.Parallel()
	dsn := sqliteDSN(t)
	sa := newStore(t, openDB(t, "sqlite", dsn), sqllease.SQLite)
	sb := newStore(t, openDB(t, "sqlite", dsn), sqllease.SQLite)
	writer := openDB(t, "sqlite", dsn)
	a, _ := scenario(t, unique(t, "locked"), sa, sb, func() func() {
		conn, err := writer.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		return func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
		}
	})
	if a.renewal == 0 {
		t.Errorf("the leader's renewals never failed ambiguously while the lock was held: %v", a.states)
	}
}
