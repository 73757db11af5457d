package sqllease

import (
	"context"
	"encoding/json"
	"time"

	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// The terms a Store renews together. Invariant (under Store.mu): a term's
// row expires, on the database's clock, no earlier than covered — the
// local time its latest confirming statement was sent plus the duration
// that statement gave the row — as long as the two clocks run at one rate
// (DESIGN.md, "Clocks"). An Extend is answered from covered alone.

type termKey struct {
	name  string
	token uint64
}

func key(g leasestore.Grant) termKey { return termKey{g.Name, g.Token} }

type term struct {
	holder  string
	dur     time.Duration // what the next renewal gives the row
	covered time.Time     // the row expires no earlier (see above)
	wanted  time.Time     // renewed until then: the holder's latest promise
}

// batch is one renewal statement for every term, and what Extends that
// wait for it learn.
type batch struct {
	done    chan struct{} // closed when answered
	err     error         // the statement's error: ambiguous for every term
	renewed map[termKey]bool
}

// renewAfter is the fraction of a row's duration after its latest
// renewal at which the renewer renews again; with grant's quarter more,
// the renewal still covers every Extend for more than a tenth of a term
// after the next one is due.
const renewAfter = 10

// renewPolicy spaces a failing renewer's retries.
var renewPolicy = backoff.Policy{Min: 20 * time.Millisecond, Max: time.Second, Jitter: 0.5}

// hold records term g, confirmed by a statement sent at sent that gave
// its row dur.
func (s *Store) hold(g leasestore.Grant, sent time.Time, dur time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.terms) == 0 {
		s.kickRenewer() // to arm its timer
	}
	s.terms[key(g)] = &term{holder: g.Holder, dur: dur, covered: sent.Add(dur), wanted: sent.Add(dur)}
}

// drop stops renewing term g.
func (s *Store) drop(g leasestore.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.terms, key(g))
}

// answer answers an Extend of g for d, begun at start, from the terms
// table: covered > 0 when the latest renewal covers d from start (the
// grant is what remains of it); else, with ok, b is the renewal to wait
// for; neither when the Store does not renew g.
func (s *Store) answer(g leasestore.Grant, d, dur time.Duration, start time.Time) (b *batch, covered time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.terms[key(g)]
	if t == nil || t.holder != g.Holder || s.closed {
		return nil, 0, false
	}
	t.dur = max(t.dur, dur)
	if left := t.covered.Sub(start); left >= d {
		if until := start.Add(left); until.After(t.wanted) {
			t.wanted = until
		}
		return nil, left, true
	}
	if until := start.Add(dur); until.After(t.wanted) {
		t.wanted = until
	}
	if s.next == nil {
		s.next = &batch{done: make(chan struct{})}
	}
	s.kickRenewer()
	return s.next, 0, true
}

// waited reports whether an Extend waits for the next renewal.
func (s *Store) waited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next != nil
}

func (s *Store) kickRenewer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// renewItem is one term of a renewal statement's JSON argument.
type renewItem struct {
	N string `json:"n"`
	T uint64 `json:"t"`
	H string `json:"h"`
	D int64  `json:"d"` // µs
}

// renew renews every wanted term in one statement, when the first of
// them is due or an Extend waits, until Close.
func (s *Store) renew() {
	defer s.wg.Done()
	bo := backoff.Backoff{Policy: renewPolicy}
	var due <-chan time.Time
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			if b := s.next; b != nil {
				b.err, s.next = ErrClosed, nil
				close(b.done)
			}
			s.mu.Unlock()
			return
		case <-s.kick:
			if wait := s.nextDue(); wait > 0 && !s.waited() {
				due = s.clk.After(wait) // a new term: nothing due yet
				continue
			}
		case <-due:
		}
		b, items, minDur := s.take()
		if len(items) == 0 {
			close(b.done)
			due = nil
			continue
		}
		sent := s.clk.Now()
		renewed, err := s.extendAll(items, minDur)
		s.settle(b, items, renewed, err, sent)
		if err != nil {
			due = s.clk.After(bo.Next())
			continue
		}
		bo.Reset()
		due = s.clk.After(s.nextDue())
	}
}

// take takes the waiting batch (or a new one) and the terms to renew,
// forgetting those whose holder stopped asking.
func (s *Store) take() (*batch, []renewItem, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.next
	if b == nil {
		b = &batch{done: make(chan struct{})}
	}
	s.next = nil
	now := s.clk.Now()
	items := make([]renewItem, 0, len(s.terms))
	var minDur time.Duration
	for k, t := range s.terms {
		if !t.wanted.After(now) {
			delete(s.terms, k) // its row expires on its own
			continue
		}
		items = append(items, renewItem{N: k.name, T: k.token, H: t.holder, D: t.dur.Microseconds()})
		if minDur == 0 || t.dur < minDur {
			minDur = t.dur
		}
	}
	return b, items, minDur
}

// extendAll sends one renewal statement, bounded by half the shortest
// row duration among the items (past it, the renewal could no longer
// keep a promise), or a second if that is longer: the Extends waiting
// for it are bounded by their own ctx.
func (s *Store) extendAll(items []renewItem, minDur time.Duration) (map[termKey]bool, error) {
	arg, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, max(minDur/2, time.Second))
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.d.extendAll, string(arg))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	renewed := make(map[termKey]bool, len(items))
	for rows.Next() {
		var k termKey
		var token int64
		if err := rows.Scan(&k.name, &token); err != nil {
			return nil, err
		}
		k.token = uint64(token)
		renewed[k] = true
	}
	return renewed, rows.Err()
}

// settle records a renewal's answer: the renewed terms are covered anew,
// the others are over (their Extends ask the row who holds it now), and
// on an error nothing changes: ambiguous for every term.
func (s *Store) settle(b *batch, items []renewItem, renewed map[termKey]bool, err error, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.err, b.renewed = err, renewed
	close(b.done)
	if err != nil {
		return
	}
	for _, it := range items {
		k := termKey{it.N, it.T}
		t := s.terms[k]
		switch {
		case t == nil: // revoked meanwhile
		case renewed[k]:
			t.covered = sent.Add(time.Duration(it.D) * time.Microsecond)
		default:
			delete(s.terms, k)
		}
	}
}

// nextDue is how long until the first term is due for renewal.
func (s *Store) nextDue() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	next := time.Duration(-1)
	for _, t := range s.terms {
		at := t.covered.Add(-t.dur).Add(t.dur / renewAfter).Sub(now)
		if next < 0 || at < next {
			next = at
		}
	}
	if next < 0 {
		return time.Hour // nothing to renew: a claim or an Extend kicks
	}
	return max(next, 0)
}
