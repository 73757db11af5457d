// Package sqllease keeps leases in a SQL database an agent already runs:
// Postgres (through pgx's database/sql driver) or SQLite (modernc.org/sqlite,
// no cgo; the SQL of Juju's own lease engine, dqlite). It answers the
// hand-made lease rows of agents that run no etcd: an INSERT with an expiry
// and no fencing token, an expiry worker that stopped with its controller
// (juju#23145), an advisory lock pinned to one connection, a leader lost to
// a 17-minute "database is locked".
//
// A Store is a leasestore.Store on one table: a row per lease, its term's
// fencing token issued by the database, its expiry on the database's clock;
// each claim, extend and revoke one statement guarded by the token; a
// process's terms renewed together in one statement; a release wakes the
// followers (LISTEN/NOTIFY on Postgres). Anything but the row's own answer
// is ambiguous, never "not the leader".
//
//	db, _ := sql.Open("pgx", dsn) // or sql.Open("sqlite", "file:leases.db?_pragma=busy_timeout(1000)")
//	store, _ := sqllease.NewStore(ctx, db, sqllease.Postgres) // or sqllease.SQLite
//	defer store.Close()
//	tr, _ := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-0", Duration: 10 * time.Second})
//
// README.md says what it promises and under which faults; DESIGN.md why.
package sqllease
