package sqllease

import "strings"

// Dialect is the SQL a Store speaks: Postgres or SQLite. Each claim,
// extend and revoke is one statement guarded by the term's row; expiry is
// counted on the database's clock (microseconds since the Unix epoch in
// the column expires), and tokens come from the database (DESIGN.md).
type Dialect struct {
	name   string
	schema []string // run in order by NewStore, idempotent
	claim  string   // (name, holder, µs) → token, or no row: held
	read   string   // (name) → holder, token, live
	extend string   // (name, token, holder, µs) → token, or no row: over
	// extendAll renews many terms in one statement: ($1 a JSON array of
	// {"n": name, "t": token, "h": holder, "d": µs}) → the renewed rows'
	// name and token.
	extendAll string
	revoke    string // (name, token, holder) → one row if revoked
	// watchRead reads the rows a release watch follows: ($1 a JSON array
	// of names) → name, token, expires, now (µs).
	watchRead string
	notify    bool // revoke notifies channel; a LISTEN wakes watches
}

// channel is the Postgres NOTIFY channel a revoke notifies, with the
// lease's name as payload.
const channel = "coldstart_leases"

// Postgres is the dialect of PostgreSQL (12 and later) through pgx's
// database/sql driver (github.com/jackc/pgx/v5/stdlib). Tokens are drawn
// from the sequence coldstart_lease_tokens; a revoke NOTIFYs the channel
// coldstart_leases, which wakes the followers' release watches.
var Postgres = &Dialect{
	name: "postgres",
	schema: []string{
		`SELECT pg_advisory_xact_lock(7236071)`, // one migration at a time
		`CREATE SEQUENCE IF NOT EXISTS coldstart_lease_tokens`,
		`CREATE TABLE IF NOT EXISTS coldstart_leases (
			name    text PRIMARY KEY,
			holder  text NOT NULL,
			token   bigint NOT NULL,
			expires bigint NOT NULL)`,
	},
	claim: pgNow(`INSERT INTO coldstart_leases AS l (name, holder, token, expires)
		VALUES ($1, $2, nextval('coldstart_lease_tokens'), {now} + $3)
		ON CONFLICT (name) DO UPDATE
			SET holder = excluded.holder, token = greatest(excluded.token, l.token + 1), expires = excluded.expires
			WHERE l.expires <= {now}
		RETURNING l.token`),
	read: pgNow(`SELECT holder, token, expires > {now} FROM coldstart_leases WHERE name = $1`),
	extend: pgNow(`UPDATE coldstart_leases SET expires = {now} + $4
		WHERE name = $1 AND token = $2 AND holder = $3 AND expires > {now}
		RETURNING token`),
	extendAll: pgNow(`UPDATE coldstart_leases AS l SET expires = {now} + u.d
		FROM jsonb_to_recordset($1::jsonb) AS u(n text, t bigint, h text, d bigint)
		WHERE l.name = u.n AND l.token = u.t AND l.holder = u.h AND l.expires > {now}
		RETURNING l.name, l.token`),
	revoke: pgNow(`WITH r AS (
			UPDATE coldstart_leases SET expires = 0
			WHERE name = $1 AND token = $2 AND holder = $3 AND expires > {now}
			RETURNING name)
		SELECT pg_notify('` + channel + `', name) FROM r`),
	watchRead: pgNow(`SELECT name, token, expires, {now} FROM coldstart_leases
		WHERE name IN (SELECT jsonb_array_elements_text($1::jsonb))`),
	notify: true,
}

// SQLite is the dialect of SQLite (3.42 and later), e.g. through
// modernc.org/sqlite (no cgo); any database/sql driver of an engine that
// speaks SQLite's SQL and its AUTOINCREMENT (dqlite's) can use it. The
// token is the row's AUTOINCREMENT rowid: a claim replaces an expired
// row, and SQLite never reuses a rowid. A release wakes the followers of
// the same Store at once; followers in other processes find it at their
// next poll.
var SQLite = &Dialect{
	name: "sqlite",
	schema: []string{
		`CREATE TABLE IF NOT EXISTS coldstart_leases (
			token   INTEGER PRIMARY KEY AUTOINCREMENT,
			name    TEXT NOT NULL UNIQUE,
			holder  TEXT NOT NULL,
			expires INTEGER NOT NULL)`,
	},
	claim: sqliteNow(`INSERT OR REPLACE INTO coldstart_leases (name, holder, expires)
		SELECT ?1, ?2, {now} + ?3
		WHERE NOT EXISTS (SELECT 1 FROM coldstart_leases WHERE name = ?1 AND expires > {now})
		RETURNING token`),
	read: sqliteNow(`SELECT holder, token, expires > {now} FROM coldstart_leases WHERE name = ?1`),
	extend: sqliteNow(`UPDATE coldstart_leases SET expires = {now} + ?4
		WHERE name = ?1 AND token = ?2 AND holder = ?3 AND expires > {now}
		RETURNING token`),
	extendAll: sqliteNow(`UPDATE coldstart_leases SET expires = {now} + u.d
		FROM (SELECT value->>'n' AS n, value->>'t' AS t, value->>'h' AS h, value->>'d' AS d FROM json_each(?1)) AS u
		WHERE coldstart_leases.name = u.n AND coldstart_leases.token = u.t
			AND coldstart_leases.holder = u.h AND coldstart_leases.expires > {now}
		RETURNING name, token`),
	revoke: sqliteNow(`UPDATE coldstart_leases SET expires = 0
		WHERE name = ?1 AND token = ?2 AND holder = ?3 AND expires > {now}
		RETURNING token`),
	watchRead: sqliteNow(`SELECT name, token, expires, {now} FROM coldstart_leases
		WHERE name IN (SELECT value FROM json_each(?1))`),
}

// The database's clock in microseconds since the Unix epoch: Postgres's
// now() is the statement's start in autocommit; SQLite's is the
// statement's too, to the millisecond.
func pgNow(q string) string {
	return strings.ReplaceAll(q, "{now}", `(extract(epoch FROM now()) * 1000000)::bigint`)
}

func sqliteNow(q string) string {
	return strings.ReplaceAll(q, "{now}", `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`)
}
