package sqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/sqllease"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/faultproxy"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/pgtest"
)

// wantUnconfirmed checks that err is ambiguous: a *leasestore.CallError
// matching leasestore.ErrUnconfirmed, never ErrHeld nor ErrNotHeld.
func wantUnconfirmed(t *testing.T, op string, err error) {
	t.Helper()
	var ce *leasestore.CallError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded, want an ambiguous error", op)
	case errors.Is(err, leasestore.ErrHeld) || errors.Is(err, leasestore.ErrNotHeld):
		t.Fatalf("%s: the definitive %v, want leasestore.ErrUnconfirmed", op, err)
	case !errors.As(err, &ce) || !errors.Is(err, leasestore.ErrUnconfirmed):
		t.Fatalf("%s: %v, want a *leasestore.CallError matching leasestore.ErrUnconfirmed", op, err)
	}
}

// A renewal that gets no answer (the route to Postgres black-holed, the
// call's deadline passes) is unconfirmed, for a term this Store renews
// and for one it does not; once the route heals after another holder took
// over, the row's answer is NotHeld naming it.
func TestPostgresNoAnswerIsUnconfirmed(t *testing.T) {
	t.Parallel()
	proxy, err := faultproxy.Listen(pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	sa := newStore(t, openDB(t, "pgx", pgtest.DSN(proxy.Addr(), "")), sqllease.Postgres)
	sb := newStore(t, openDB(t, "pgx", pgtest.DSN(pg.Addr(), "")), sqllease.Postgres)
	const d = 300 * time.Millisecond
	name := unique(t, "noanswer")
	g, err := sa.Claim(context.Background(), name, "a", d)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set(faultproxy.BlackHole)
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 100*time.Millisecond)
	}
	ctx, cancel := call()
	_, err = sa.Extend(ctx, g, 2*d) // more than the latest renewal covers: waits for one
	cancel()
	wantUnconfirmed(t, "Extend through a black hole", err)
	foreign := g
	foreign.Token++ // not renewed by sa: one statement
	ctx, cancel = call()
	_, err = sa.Extend(ctx, foreign, d)
	cancel()
	wantUnconfirmed(t, "a one-statement Extend through a black hole", err)
	ctx, cancel = call()
	err = sa.Revoke(ctx, g)
	cancel()
	wantUnconfirmed(t, "Revoke through a black hole", err)

	<-time.After(2 * d) // the row expires on Postgres's clock
	b, err := sb.Claim(context.Background(), name, "b", d)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set(faultproxy.None)
	_, err = sa.Extend(context.Background(), g, d)
	var nh *leasestore.NotHeldError
	if !errors.As(err, &nh) || nh.Holder != "b" || b.Token <= g.Token {
		t.Fatalf("Extend after the take-over: %v (b's token %d, a's %d), want NotHeld naming b", err, b.Token, g.Token)
	}
}

// SQLite's "database is locked" (SQLITE_BUSY, after its busy timeout) is
// unconfirmed, never NotHeld.
func TestSQLiteBusyIsUnconfirmed(t *testing.T) {
	t.Parallel()
	dsn := sqliteFile(t) + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(50)"
	s := newStore(t, openDB(t, "sqlite", dsn), sqllease.SQLite)
	name := unique(t, "busy")
	g, err := s.Claim(context.Background(), name, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := openDB(t, "sqlite", dsn).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	g.Token++ // a term s does not renew: one statement, which meets the lock
	_, err = s.Extend(context.Background(), g, time.Minute)
	wantUnconfirmed(t, "Extend while another writer holds the lock", err)
	_, err = s.Claim(context.Background(), name+"-2", "a", time.Minute)
	wantUnconfirmed(t, "Claim while another writer holds the lock", err)
}

// Tokens come from the database and strictly increase across hand-overs
// and across a row deleted by hand.
func TestTokensIncreaseAcrossDeletion(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			db := e.open(t, "")
			s := newStore(t, db, e.dialect)
			name := unique(t, "deleted")
			var last uint64
			for i := range 3 {
				g, err := s.Claim(context.Background(), name, "a", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if g.Token <= last {
					t.Fatalf("claim %d got token %d after %d", i, g.Token, last)
				}
				last = g.Token
				if i%2 == 0 {
					err = s.Revoke(context.Background(), g)
				} else {
					_, err = db.Exec(`DELETE FROM coldstart_leases WHERE name = '` + name + `'`)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// On a pool of one connection, LISTEN would take it from every statement:
// the watch fails instead (the tracker polls), and the Store still answers.
func TestPostgresPoolOfOneDoesNotListen(t *testing.T) {
	t.Parallel()
	db := openDB(t, "pgx", pgtest.DSN(pg.Addr(), ""))
	db.SetMaxOpenConns(1)
	s := newStore(t, db, sqllease.Postgres)
	name := unique(t, "poolofone")
	g, err := s.Claim(context.Background(), name, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(context.Background(), name, "b", time.Minute)
	var held *leasestore.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second claim: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	select {
	case err := <-s.WatchRelease(ctx, held):
		if err == nil {
			t.Fatal("the watch yielded a release of a live term")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch on a pool of one neither failed nor yielded")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if err := s.Revoke(rctx, g); err != nil { // a statement: it needs the connection
		t.Fatalf("Revoke after the watch: %v", err)
	}
}

func TestNewStoreRefusesNils(t *testing.T) {
	db := openDB(t, "sqlite", sqliteDSN(t))
	for _, c := range []struct {
		what string
		db   *sql.DB
		d    *sqllease.Dialect
	}{{"a nil db", nil, sqllease.SQLite}, {"a nil dialect", db, nil}} {
		if s, err := sqllease.NewStore(context.Background(), c.db, c.d); !jujuerrors.Is(err, jujuerrors.NotValid) {
			t.Errorf("NewStore with %s: %v, %v; want a NotValid error", c.what, s, err)
		}
	}
}
