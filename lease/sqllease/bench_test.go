package sqllease_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/sqllease"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/pgtest"
)

// handOverDuration is the lease of the hand-over benchmark, as
// etcdlease's BenchmarkGracefulHandOver has it (trackers claim 2 s).
const handOverDuration = time.Second

// BenchmarkGracefulHandOver measures the graceful gap — the leader starts
// its release (Close with ReleaseOnClose) → the waiting follower leads —
// with leader and follower on Stores of their own, as two processes
// would: on Postgres, woken by LISTEN/NOTIFY; on SQLite (one file), by the
// follower's poll. Each op is one hand-over; run with -benchtime=24x, as
// etcdlease's benchmark of the same name.
func BenchmarkGracefulHandOver(b *testing.B) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			stores := []*sqllease.Store{newStore(b, e.open(b, ""), e.dialect), newStore(b, e.open(b, ""), e.dialect)}
			name := unique(b, "handover")
			cfg := func(i int) lease.Config {
				return lease.Config{Store: stores[i%2], Name: name, Holder: fmt.Sprintf("n%d", i),
					Duration: handOverDuration, ReleaseOnClose: true, Margin: 500 * time.Millisecond}
			}
			leader := benchTracker(b, cfg(0))
			awaitState(b, leader, lease.Held)
			var gaps []time.Duration
			for i := 1; b.Loop(); i++ {
				f := benchTracker(b, cfg(i))
				awaitState(b, f, lease.NotHeld)
				start := time.Now()
				if err := leader.Close(); err != nil {
					b.Fatal(err)
				}
				awaitState(b, f, lease.Held)
				gaps = append(gaps, time.Since(start))
				leader = f
			}
			slices.Sort(gaps)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(gaps[len(gaps)/2]), "p50-ms")
			b.ReportMetric(ms(gaps[len(gaps)-1]), "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func benchTracker(b *testing.B, cfg lease.Config) *lease.Tracker {
	b.Helper()
	tr, err := lease.NewTracker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr
}

// BenchmarkManyLeases starts N trackers (Duration 10 s, the default
// settings) on one Store together, as one controller holding a lease per
// application would, and reports the time until all are held
// (claim-all-s) and the statements the database served per second in the
// steady state after (stmt/s: Postgres's committed transactions, every
// statement being one; SQLite's, counted at its driver), over 10 s.
func BenchmarkManyLeases(b *testing.B) {
	const d, steady = 10 * time.Second, 10 * time.Second
	for _, e := range engines {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/N=%d", e.name, n), func(b *testing.B) {
				var db *sql.DB
				var count func() int64
				if e.dialect == sqllease.Postgres {
					db = openDB(b, "pgx", pgtest.DSN(pg.Addr(), ""))
					db.SetMaxOpenConns(20)
					count = func() int64 { return pgCommits(b, db) - 1 } // less the count's own
				} else {
					db = sql.OpenDB(countingConnector{sqliteDSN(b)})
					b.Cleanup(func() { db.Close() })
					count = sqliteStatements.Load
				}
				for b.Loop() {
					store := newStore(b, db, e.dialect)
					prefix := unique(b, "app")
					begun := time.Now()
					trackers := make([]*lease.Tracker, n)
					for i := range trackers {
						trackers[i] = benchTracker(b, lease.Config{Store: store, Name: fmt.Sprintf("%s-%d", prefix, i),
							Holder: "controller-0", Duration: d})
					}
					for _, tr := range trackers {
						awaitState(b, tr, lease.Held)
					}
					b.ReportMetric(time.Since(begun).Seconds(), "claim-all-s")
					before, at := count(), time.Now()
					<-time.After(steady)
					b.ReportMetric(float64(count()-before)/time.Since(at).Seconds(), "stmt/s")
					b.ReportMetric(0, "ns/op")
					for _, tr := range trackers {
						tr.Close()
					}
					store.Close()
				}
			})
		}
	}
}

// pgCommits is the committed transactions of the database so far.
func pgCommits(b *testing.B, db *sql.DB) int64 {
	var n int64
	if err := db.QueryRow(`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// sqliteStatements counts the statements countingConnector's connections
// ran.
var sqliteStatements atomic.Int64

// countingConnector opens modernc's SQLite connections that count their
// statements.
type countingConnector struct{ dsn string }

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(sqliteConn)}, nil
}

func (c countingConnector) Driver() driver.Driver { return &sqlite.Driver{} }

type sqliteConn interface {
	driver.Conn
	driver.QueryerContext
	driver.ExecerContext
	driver.ConnBeginTx
}

type countingConn struct{ sqliteConn }

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	sqliteStatements.Add(1)
	return c.sqliteConn.QueryContext(ctx, q, args)
}

func (c countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	sqliteStatements.Add(1)
	return c.sqliteConn.ExecContext(ctx, q, args)
}
