package sqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Store is a leasestore.Store (and leasestore.ReleaseWatcher and
// leasestore.Reporter) on one table of a SQL database: a row per lease
// naming its holder, the term's fencing token and the term's expiry on
// the database's clock.
//
// Claim, Revoke and the first Extend of a term the Store did not claim
// are one statement each. The terms it claimed are renewed together: one
// statement renews them all, a tenth of a term after the last, and an
// Extend is answered from the latest renewal when that still covers what
// it asks (DESIGN.md, "Renewed together"). Rows are granted a quarter
// more than asked, so that the answer is ready.
//
// Every error but the row's own answer is ambiguous (a *leasestore.CallError
// matching leasestore.ErrUnconfirmed): a lost connection, a statement
// timeout, a serialization failure or deadlock (SQLSTATE 40001, 40P01),
// SQLite's "database is locked" (SQLITE_BUSY). ErrHeld and ErrNotHeld
// come only from the row.
//
// A Store is safe for concurrent use. Close it when done.
type Store struct {
	db    *sql.DB
	d     *Dialect
	clk   clock.Clock
	what  string // CallError.Store
	calls leasestore.Counters

	mu      sync.Mutex
	terms   map[termKey]*term // the terms this Store renews together
	next    *batch            // the renewal that Extends wait for; nil until one does
	closed  bool
	watches map[*watch]struct{}
	listen  *listener // Postgres: the LISTEN connection; nil while none

	kick  chan struct{} // wakes the renewer (buffered)
	wake  chan struct{} // wakes the release watches (buffered)
	done  chan struct{} // closed by Close
	stop  context.CancelFunc
	ctx   context.Context // ends at Close
	wg    sync.WaitGroup
	close sync.Once
}

// Option configures a Store. A nil Option is ignored.
type Option func(*Store)

// WithClock sets the clock the Store times renewals and watches on; nil
// means clock.WallClock. Expiry is always on the database's clock.
func WithClock(clk clock.Clock) Option {
	return func(s *Store) {
		if clk == nil {
			clk = clock.WallClock
		}
		s.clk = clk
	}
}

// ErrClosed is the cause of a call made after Close: it was not sent.
var ErrClosed = errors.New("sqllease: store closed")

// NewStore returns a Store on db in dialect d, creating its table (and,
// on Postgres, its sequence) if they do not exist: see Dialect for the
// statements. It starts the goroutines that renew and watch; Close ends
// them.
func NewStore(ctx context.Context, db *sql.DB, d *Dialect, opts ...Option) (*Store, error) {
	switch {
	case db == nil:
		return nil, jujuerrors.NotValidf("db <nil> (must be a *sql.DB)")
	case d == nil:
		return nil, jujuerrors.NotValidf("dialect <nil> (must be sqllease.Postgres or sqllease.SQLite)")
	}
	if err := migrate(ctx, db, d); err != nil {
		return nil, fmt.Errorf("sqllease: creating the table: %w", err)
	}
	s := &Store{
		db: db, d: d, clk: clock.WallClock, what: "sqllease " + d.name,
		terms: make(map[termKey]*term), watches: make(map[*watch]struct{}),
		kick: make(chan struct{}, 1), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.wg.Add(2)
	go s.renew()
	go s.watchLoop()
	return s, nil
}

func migrate(ctx context.Context, db *sql.DB, d *Dialect) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range d.schema {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Close stops renewing and watching, and waits for the Store's
// goroutines. The terms it held are not revoked: their rows expire on the
// database's clock within a quarter more than their last grant (revoke
// them first, e.g. with lease.Config.ReleaseOnClose). Watches yield
// nothing more. Calls after Close fail with ErrClosed, not sent. The
// database handle stays open; it is the caller's.
func (s *Store) Close() error {
	s.close.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.stop()
		s.wg.Wait()
	})
	return nil
}

// StoreReport counts the calls the Store served.
func (s *Store) StoreReport() leasestore.Report { return s.calls.StoreReport() }

// grant is the duration a row is given for a term of d: a quarter more,
// so that the latest renewal still covers an Extend of d (renew).
func grant(d time.Duration) time.Duration { return d + d/4 }

// Claim takes the lease if its row is absent or expired, with a new token
// from the database. It grants a quarter more than d.
func (s *Store) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpClaim)
	g, err := s.claim(ctx, name, holder, d)
	done(err)
	return g, err
}

func (s *Store) claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	if err := leasestore.CheckName("name", name); err != nil {
		return leasestore.Grant{}, err
	}
	if err := leasestore.CheckName("holder", holder); err != nil {
		return leasestore.Grant{}, err
	}
	if d <= 0 {
		return leasestore.Grant{}, jujuerrors.NotValidf("duration %v (must be positive)", d)
	}
	fail := func(err error) error {
		return &leasestore.CallError{Store: s.what, Op: leasestore.OpClaim, Name: name, Holder: holder, Err: err}
	}
	if err := s.unsent(ctx); err != nil {
		return leasestore.Grant{}, fail(err)
	}
	dur := grant(d)
	sent := s.clk.Now()
	var token int64
	err := s.db.QueryRowContext(ctx, s.d.claim, name, holder, dur.Microseconds()).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		holderNow, tokenNow, _, rerr := s.read(ctx, name)
		if rerr != nil {
			// Refused for sure, by a term the read could not name.
			return leasestore.Grant{}, &leasestore.HeldError{Name: name}
		}
		return leasestore.Grant{}, &leasestore.HeldError{Name: name, Holder: holderNow, Token: tokenNow}
	}
	if err != nil {
		return leasestore.Grant{}, fail(err)
	}
	g := leasestore.Grant{Name: name, Holder: holder, Token: uint64(token), Duration: dur}
	s.hold(g, sent, dur)
	return g, nil
}

// read returns the lease's row: its holder, token, and whether its term
// is live on the database's clock.
func (s *Store) read(ctx context.Context, name string) (holder string, token uint64, live bool, err error) {
	var t int64
	err = s.db.QueryRowContext(ctx, s.d.read, name).Scan(&holder, &t, &live)
	return holder, uint64(t), live, err
}

// notHeld is the row's answer that term g is over, naming who holds the
// lease now when the row says so.
func (s *Store) notHeld(ctx context.Context, g leasestore.Grant) error {
	e := &leasestore.NotHeldError{Name: g.Name, Token: g.Token}
	holder, token, live, err := s.read(ctx, g.Name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		e.Reason = "no row"
	case err != nil:
		e.Reason = "the row no longer names the term"
	case token != g.Token:
		e.Reason = fmt.Sprintf("token %d now", token)
		if live {
			e.Holder = holder
		}
	case live:
		e.Reason = fmt.Sprintf("the row names holder %q", holder)
		e.Holder = holder
	default:
		e.Reason = "expired or revoked"
	}
	return e
}

// Extend renews term g for at least d (a quarter more on the row). A term
// this Store holds is answered from its latest renewal when that covers
// d, and otherwise waits for the next one; any other term is one
// statement.
func (s *Store) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpExtend)
	g, err := s.extend(ctx, g, d)
	done(err)
	return g, err
}

func (s *Store) extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	if d <= 0 {
		return leasestore.Grant{}, jujuerrors.NotValidf("duration %v (must be positive)", d)
	}
	fail := func(err error) error {
		return &leasestore.CallError{Store: s.what, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if err := s.unsent(ctx); err != nil {
		return leasestore.Grant{}, fail(err)
	}
	dur := grant(d)
	start := s.clk.Now()
	b, covered, ok := s.answer(g, d, dur, start)
	switch {
	case covered > 0:
		g.Duration = covered
		return g, nil
	case ok: // ours, but the latest renewal is too old: wait for the next
		select {
		case <-b.done:
		case <-ctx.Done():
			return leasestore.Grant{}, fail(context.Cause(ctx))
		}
		if b.err != nil {
			return leasestore.Grant{}, fail(b.err)
		}
		if !b.renewed[key(g)] {
			return leasestore.Grant{}, s.notHeld(ctx, g)
		}
		g.Duration = dur // the renewal was sent after start
		return g, nil
	}
	var token int64
	err := s.db.QueryRowContext(ctx, s.d.extend, g.Name, int64(g.Token), g.Holder, dur.Microseconds()).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return leasestore.Grant{}, s.notHeld(ctx, g)
	}
	if err != nil {
		return leasestore.Grant{}, fail(err)
	}
	s.hold(g, start, dur)
	g.Duration = dur
	return g, nil
}

// Revoke ends term g: one statement that sets the row's expiry in the
// past, guarded by its token; on Postgres it notifies the followers.
func (s *Store) Revoke(ctx context.Context, g leasestore.Grant) error {
	done := s.calls.Begin(leasestore.OpRevoke)
	err := s.revoke(ctx, g)
	done(err)
	return err
}

func (s *Store) revoke(ctx context.Context, g leasestore.Grant) error {
	fail := func(err error) error {
		return &leasestore.CallError{Store: s.what, Op: leasestore.OpRevoke, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if err := s.unsent(ctx); err != nil {
		return fail(err)
	}
	s.drop(g) // renewed no more, whatever the answer
	rows, err := s.db.QueryContext(ctx, s.d.revoke, g.Name, int64(g.Token), g.Holder)
	if err != nil {
		return fail(err)
	}
	revoked := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if !revoked {
		return s.notHeld(ctx, g)
	}
	s.wakeWatches()
	return nil
}

// unsent returns the reason a call is not sent: its ctx ended first, or
// the Store is closed.
func (s *Store) unsent(ctx context.Context) error {
	select {
	case <-s.done:
		return fmt.Errorf("%w: %w", leasestore.ErrNotSent, ErrClosed)
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", leasestore.ErrNotSent, context.Cause(ctx))
	}
	return nil
}
