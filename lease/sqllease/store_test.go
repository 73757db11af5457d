package sqllease_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/lease/sqllease"
	"github.com/coldstart-go/coldstart/lease/sqllease/internal/pgtest"
)

// engine is a database the tests run on: a Postgres database of the
// package's server, or a SQLite file.
type engine struct {
	name    string
	dialect *sqllease.Dialect
	// open returns a handle on the engine's database at addr (Postgres:
	// the server's or a proxy's address; SQLite: ignored), closed at the
	// test's end.
	open func(t testing.TB, addr string) *sql.DB
}

var engines = []engine{
	{"Postgres", sqllease.Postgres, func(t testing.TB, addr string) *sql.DB {
		if addr == "" {
			addr = pg.Addr()
		}
		return openDB(t, "pgx", pgtest.DSN(addr, ""))
	}},
	{"SQLite", sqllease.SQLite, func(t testing.TB, _ string) *sql.DB {
		return openDB(t, "sqlite", sqliteDSN(t))
	}},
}

// sqliteDSN is a SQLite file of the test's own (one per test, shared by
// every handle the test opens), in WAL mode (synchronous NORMAL: no fsync
// per commit) with a busy timeout.
func sqliteDSN(t testing.TB) string {
	return sqliteFile(t) + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)"
}

var sqliteFiles sync.Map // testing.TB → its file

func sqliteFile(t testing.TB) string {
	if f, ok := sqliteFiles.Load(t); ok {
		return f.(string)
	}
	f := "file:" + filepath.Join(t.TempDir(), "leases.db")
	sqliteFiles.Store(t, f)
	t.Cleanup(func() { sqliteFiles.Delete(t) })
	return f
}

func openDB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newStore returns a Store on db, closed at the test's end.
func newStore(t testing.TB, db *sql.DB, d *sqllease.Dialect) *sqllease.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := sqllease.NewStore(ctx, db, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// unique makes lease names of a test its own on the shared Postgres.
func unique(t testing.TB, name string) string {
	return fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
}

func TestStoreContract(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
				return leasetest.Harness{
					Store:   newStore(t, e.open(t, ""), e.dialect),
					Advance: func(d time.Duration) { <-time.After(d) }, // the database's clock
					Term:    200 * time.Millisecond,
				}
			})
		})
	}
}
