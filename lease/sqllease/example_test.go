package sqllease_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/sqllease"
)

// A controller keeps its lease in the Postgres it already runs (or in a
// SQLite file beside it), and leads while it holds it.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // e.g. postgres://app@db:5432/app
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqllease.NewStore(ctx, db, sqllease.Postgres) // creates its table if absent
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	tr, err := lease.NewTracker(lease.Config{
		Store:          store,
		Name:           "singular-controller",
		Holder:         os.Getenv("HOSTNAME"),
		Duration:       10 * time.Second,
		ReleaseOnClose: true, // the next controller takes over at once
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	err = tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
		// Lead until ctx ends; guard writes elsewhere with st.Token.
		<-ctx.Done()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

// On SQLite: one file, in WAL mode, synchronous NORMAL (a commit waits
// for no fsync, which a loaded disk can stretch past a call timeout), with
// a busy timeout shorter than the tracker's call timeout (Duration/4), so
// that "database is locked" comes back as an ambiguous answer in time.
func Example_sqlite() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:/var/lib/agent/leases.db?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(1000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqllease.NewStore(ctx, db, sqllease.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}
