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

	"github.com/jackc/pgx/v5/stdlib"
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
// (claim-all-s) and the statements the Store sent per second in the
// steady state after (stmt/s, counted at the driver), over 10 s. SQLite's
// handle has one connection.
func BenchmarkManyLeases(b *testing.B) {
	const d, steady = 10 * time.Second, 10 * time.Second
	for _, e := range engines {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/N=%d", e.name, n), func(b *testing.B) {
				dsn, drv := pgtest.DSN(pg.Addr(), ""), driver.Driver(stdlib.GetDefaultDriver())
				if e.dialect == sqllease.SQLite {
					dsn, drv = sqliteDSN(b), &sqlite.Driver{}
				}
				db := sql.OpenDB(countingConnector{drv, dsn})
				b.Cleanup(func() { db.Close() })
				db.SetMaxOpenConns(16) // Postgres: max_connections is 300, and 10,000 claims come at once
				if e.dialect == sqllease.SQLite {
					db.SetMaxOpenConns(1) // one writer: queued in the process, not in SQLite's busy sleeps
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
					awaitAll(b, trackers, time.Minute)
					b.ReportMetric(time.Since(begun).Seconds(), "claim-all-s")
					before, at := statements.Load(), time.Now()
					<-time.After(steady)
					b.ReportMetric(float64(statements.Load()-before)/time.Since(at).Seconds(), "stmt/s")
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

// awaitAll waits until every tracker is held, within d in all.
func awaitAll(b testing.TB, trackers []*lease.Tracker, d time.Duration) {
	b.Helper()
	deadline := time.After(d)
	for i, tr := range trackers {
		for {
			st, changed := tr.Current()
			if st.State == lease.Held {
				break
			}
			select {
			case <-changed:
			case <-deadline:
				b.Fatalf("tracker %d of %d not held within %v (last %+v)", i, len(trackers), d, st)
			}
		}
	}
}

// statements counts the statements countingConnector's connections ran
// (database/sql sends each query and exec as one statement: no prepares).
var statements atomic.Int64

// countingConnector opens a driver's connections that count their
// statements. (Postgres's LISTEN needs pgx's own connection: not these.)
type countingConnector struct {
	drv driver.Driver
	dsn string
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(fullConn)}, nil
}

func (c countingConnector) Driver() driver.Driver { return c.drv }

type fullConn interface {
	driver.Conn
	driver.QueryerContext
	driver.ExecerContext
	driver.ConnBeginTx
}

type countingConn struct{ fullConn }

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	statements.Add(1)
	return c.fullConn.QueryContext(ctx, q, args)
}

func (c countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	statements.Add(1)
	return c.fullConn.ExecContext(ctx, q, args)
}
