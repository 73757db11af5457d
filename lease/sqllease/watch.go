package sqllease

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// pollInterval is how often the release watches of a Store read their
// rows when nothing wakes them: on SQLite, the only way a release by
// another process is seen (Postgres wakes them with NOTIFY).
const pollInterval = 50 * time.Millisecond

// watch is one WatchRelease: the term it follows and its channel.
type watch struct {
	name  string
	token uint64
	ch    chan error // buffered 1: one value, then closed
	stop  func() bool
}

// WatchRelease yields nil when the term held names is over: its row
// expired on the database's clock, revoked, replaced or deleted. One
// goroutine of the Store reads the rows of every watch in one statement,
// when a release wakes it (a revoke by this Store; on Postgres, the
// NOTIFY of any Store's revoke, through one LISTEN connection), when the
// first row it follows is due to expire, and on SQLite every 50ms. It
// yields an error when the rows cannot be read or the LISTEN connection
// breaks: the tracker then polls.
func (s *Store) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	ch := make(chan error, 1)
	if held == nil {
		ch <- jujuerrors.NotValidf("nil HeldError")
		close(ch)
		return ch
	}
	w := &watch{name: held.Name, token: held.Token, ch: ch}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ch // yields nothing, as after ctx
	}
	s.watches[w] = struct{}{}
	// Set before anyone can resolve w; the func runs on a goroutine of
	// its own, so holding s.mu here is safe.
	w.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
	})
	s.mu.Unlock()
	s.wakeWatches()
	return ch
}

func (s *Store) wakeWatches() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// resolve ends w with err. Under s.mu.
func (s *Store) resolve(w *watch, err error) {
	if _, ok := s.watches[w]; !ok {
		return // its ctx ended
	}
	delete(s.watches, w)
	w.stop()
	w.ch <- err
	close(w.ch)
}

// watchLoop serves every release watch until Close.
func (s *Store) watchLoop() {
	defer s.wg.Done()
	var due <-chan time.Time
	for {
		var poll <-chan time.Time
		if !s.d.notify && s.watching() {
			poll = s.clk.After(pollInterval)
		}
		select {
		case <-s.done:
			return
		case <-s.wake:
		case <-due:
		case <-poll:
		}
		due = nil
		if wait, ok := s.readWatches(); ok {
			due = s.clk.After(wait)
		}
	}
}

func (s *Store) watching() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches) > 0
}

// readWatches reads the rows of every watch and yields to those whose
// term is over; it returns how long until the first of the others
// expires on the database's clock.
func (s *Store) readWatches() (time.Duration, bool) {
	s.mu.Lock()
	names := make(map[string]bool, len(s.watches))
	for w := range s.watches {
		names[w.name] = true
	}
	s.mu.Unlock()
	if len(names) == 0 {
		return 0, false
	}
	if err := s.listening(); err != nil {
		s.failWatches(err)
		return 0, false
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	type row struct{ token, expires, now int64 }
	rows := make(map[string]row, len(list))
	err := func() error {
		arg, err := json.Marshal(list)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		rs, err := s.db.QueryContext(ctx, s.d.watchRead, string(arg))
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var n string
			var r row
			if err := rs.Scan(&n, &r.token, &r.expires, &r.now); err != nil {
				return err
			}
			rows[n] = r
		}
		return rs.Err()
	}()
	if err != nil {
		s.failWatches(err)
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := time.Duration(-1)
	for w := range s.watches {
		if !names[w.name] {
			continue // begun since: read next time
		}
		r, ok := rows[w.name]
		if !ok || uint64(r.token) != w.token || r.expires <= r.now {
			s.resolve(w, nil)
			continue
		}
		left := time.Duration(r.expires-r.now)*time.Microsecond + time.Millisecond
		if next < 0 || left < next {
			next = left
		}
	}
	return next, next >= 0
}

// failWatches yields err to every watch: the tracker polls instead.
func (s *Store) failWatches(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	err = &leasestore.CallError{Store: s.what, Op: leasestore.OpWatchRelease, Err: err}
	for w := range s.watches {
		s.resolve(w, err)
	}
}

// listener is the Postgres connection that LISTENs for revokes.
type listener struct {
	ready chan struct{} // closed once LISTEN is in force
	ended chan struct{} // closed when the connection is done with
	err   error         // why it ended; read after ended
}

// listening makes sure, on Postgres, that a LISTEN is in force before the
// rows are read, so that no release after the read goes unseen; it
// returns why not when it cannot be.
func (s *Store) listening() error {
	if !s.d.notify {
		return nil
	}
	if s.db.Stats().MaxOpenConnections == 1 {
		return errOnePool // LISTEN would hold the only connection
	}
	s.mu.Lock()
	l := s.listen
	if l == nil {
		l = &listener{ready: make(chan struct{}), ended: make(chan struct{})}
		s.listen = l
		s.wg.Add(1)
		go s.listenOn(l)
	}
	s.mu.Unlock()
	select {
	case <-l.ready:
		return nil
	case <-l.ended:
	case <-s.done:
		return ErrClosed
	}
	s.mu.Lock()
	if s.listen == l {
		s.listen = nil // the next watch dials again
	}
	s.mu.Unlock()
	return l.err
}

// errOnePool says the pool is too small to LISTEN on one of its connections.
var errOnePool = errors.New("sqllease: LISTEN needs a pool of 2 or more connections (db.SetMaxOpenConns)")

// errNoListen says the database is not reached through pgx's driver.
var errNoListen = errors.New("sqllease: LISTEN needs github.com/jackc/pgx/v5/stdlib's driver")

// listenOn holds one connection of the pool for LISTEN until Close or
// until it breaks; then it fails the watches, which dial it again.
func (s *Store) listenOn(l *listener) {
	defer s.wg.Done()
	defer close(l.ended)
	conn, err := s.db.Conn(s.ctx)
	if err != nil {
		l.err = err
		return
	}
	defer conn.Close()
	l.err = conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoListen
		}
		c := pc.Conn()
		if _, err := c.Exec(s.ctx, "LISTEN "+channel); err != nil {
			return fmt.Errorf("%w (%w)", err, driver.ErrBadConn)
		}
		close(l.ready)
		for {
			if _, err := c.WaitForNotification(s.ctx); err != nil {
				// Never back into the pool: it LISTENs.
				return fmt.Errorf("LISTEN %s: %w (%w)", channel, err, driver.ErrBadConn)
			}
			s.wakeWatches()
		}
	})
	select {
	case <-l.ready:
		s.failWatches(l.err) // a watch that broke: they dial again
	default:
	}
	s.mu.Lock()
	if s.listen == l {
		s.listen = nil
	}
	s.mu.Unlock()
}
