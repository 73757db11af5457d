package etcdlease

import (
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// termTable is what a SessionStore knows of the terms it claimed, by lease
// name: the latest term of each name, what the prefix watch saw of each
// key, and the calls of ours that may be putting a key. It is pure state:
// it calls nothing (no etcd, no clock: callers pass the time and the
// session's promise), and SessionStore.mu guards it.
//
// Its invariants (a term's state only moves forward; a live term ends only
// on etcd's word or when abandoned; a grant never reaches past the
// session's confirmed promise) are in DESIGN.md, "The term table".
type termTable struct {
	terms map[string]*term
	// changed is, by lease name, the latest change of its key the watch
	// saw (or, after a resync, its state or absence): a term older than
	// a change that leaves the key not recording it is over, even if it
	// is recorded only after the watch saw that.
	changed map[string]keyChange
	// busy counts, by lease name, the claims and adoptions in progress:
	// a key of ours they may have put is not yet recorded as a term.
	busy map[string]int
	// retired are the sessions retired (see session), by when: an
	// Extend of a live term on one moves its key to the current session.
	// An entry is dropped once the session's etcd lease has surely
	// expired (retiredFor), taking the keys not moved with it.
	retired map[clientv3.LeaseID]time.Time
}

// keyChange is a change of a key at rev: the key as it left it (nil when
// deleted), and whether another process created it (not on the session
// current then).
type keyChange struct {
	rev   int64
	kv    *keyValue
	other bool
}

// holder is who the key names, if another process created it.
func (c keyChange) holder() string {
	if !c.other || c.kv == nil {
		return ""
	}
	return namedHolder(c.kv.Value)
}

func newTermTable() termTable {
	return termTable{terms: make(map[string]*term), changed: make(map[string]keyChange), busy: make(map[string]int),
		retired: make(map[clientv3.LeaseID]time.Time)}
}

// ours says, for termRecord, whether the etcd lease id carries the keys of
// this store's terms: the session cur (zero: none), a retired one, or
// sess, the session a term's key was put or moved on.
func (tt *termTable) ours(cur, sess clientv3.LeaseID) func(id int64) bool {
	return func(id int64) bool {
		_, retired := tt.retired[clientv3.LeaseID(id)]
		return id != 0 && (id == int64(cur) || id == int64(sess) || retired)
	}
}

// overSince is why the term token of holder on session sess is over, as
// the latest change of its key that the watch saw after the term began
// shows (empty when none did, or the key still records the term), and
// whom the key names instead (see termRecord).
func (tt *termTable) overSince(name, holder string, token uint64, sess, cur clientv3.LeaseID) (why, now string) {
	c, ok := tt.changed[name]
	if !ok || c.rev <= int64(token) {
		return "", ""
	}
	why, now = termRecord(leasestore.Grant{Holder: holder, Token: token}, c.kv, tt.ours(cur, sess))
	if c.kv != nil && c.kv.CreateRevision > int64(token) {
		now = c.holder() // another term's: name it if another process made it
	}
	return why, now
}

// termState is where a term is in its life:
//
//	unsure  ──adopted by a retry──▶ live
//	unsure  ──put found applied──▶ expired      (nobody was promised it)
//	unsure  ──put not applied────▶ over
//	live    ──abandoned──────────▶ expired
//	live    ──etcd said so───────▶ over
//	expired ──key deleted────────▶ over
//
// Extend of an expired or over term is answered "not held"; only an
// expired term's key is still to be deleted by the store.
type termState int

const (
	termLive    termState = iota
	termUnsure            // a claim whose transaction was unconfirmed: token unknown
	termExpired           // abandoned (or never granted); its key is yet to be deleted
	termOver              // over, and its key gone (or someone else's)
)

func (s termState) String() string {
	switch s {
	case termLive:
		return "live"
	case termUnsure:
		return "unsure"
	case termExpired:
		return "expired"
	case termOver:
		return "over"
	}
	return fmt.Sprintf("termState(%d)", int(s))
}

// term is a claim this store made. It stays in the table after it ends (a
// few bytes per name), so that Extend of an ended term is answered without
// a read.
type term struct {
	token   uint64 // create revision of the key; 0 while termUnsure
	holder  string
	sess    clientv3.LeaseID // the session its key is on
	expires time.Time        // the end of the furthest grant, on the store's clock
	// asked is the duration the holder asked for last (its claim's or its
	// latest Extend's, answered or not).
	asked time.Duration
	state termState
	// promised says a holder was granted the term; a term never granted
	// (an orphan key, an unconfirmed claim's put) was nobody's.
	promised bool
	lost     map[chan struct{}]struct{} // Lost channels to close when it ends
	// why is what the store saw that ended it, when etcd's word did:
	// the reason its Extend gives; after, whom the key named then.
	why, after string
}

// abandoned says whether the holder of the live term t stopped asking for
// it while the store could reach etcd: the session is confirmed at now, and
// neither the furthest grant nor the holder's latest ask since the store
// could reach etcd again (p.reachable) reaches now. An outage alone never
// abandons a term (DESIGN.md, "SessionStore: every promise from one session").
func (t *term) abandoned(now time.Time, p promise) bool {
	return p.confirmedAt(now) && !now.Before(t.expires) && !now.Before(p.reachable.Add(t.asked))
}

// endFor moves t to state, as end does, for the reason why, the key
// naming after (empty: nobody, or not known).
func (t *term) endFor(state termState, why, after string) {
	t.why, t.after = why, after
	t.end(state)
}

// end moves t to state (expired or over) and closes its Lost channels.
func (t *term) end(state termState) {
	t.state = state
	for ch := range t.lost {
		close(ch)
	}
	t.lost = nil
}

// set records t as the term of name, ending the one before it.
func (tt *termTable) set(name string, t *term) {
	if old := tt.terms[name]; old != nil && old != t {
		old.end(termOver)
	}
	tt.terms[name] = t
}

// endOf ends the term of name with token, if it is the one recorded.
func (tt *termTable) endOf(name string, token uint64, state termState) {
	if t := tt.terms[name]; t != nil && t.token == token {
		t.end(state)
	}
}

// record records the live term token of name, put at start on session p,
// for holder who asked for d, and returns what it grants: d, or less if
// p's promise ends sooner. A term that cannot be granted (the watch saw it
// end already; the promise ran out or the session is lost) is recorded as
// ended and its error is ambiguous: the key was put, but nobody was
// promised it.
func (tt *termTable) record(name, holder string, token uint64, p promise, start time.Time, d time.Duration) (time.Duration, error) {
	granted := min(d, p.until.Sub(start))
	t := &term{token: token, holder: holder, sess: p.id, expires: start.Add(max(granted, 0)), asked: d, promised: granted > 0}
	tt.set(name, t)
	switch why, after := tt.overSince(name, holder, token, p.id, p.id); {
	case why != "":
		// The watch saw the key deleted, created again or rewritten
		// after this term began, before the term was recorded.
		t.endFor(termOver, why, after)
		return 0, fmt.Errorf("term ended as soon as it began: %s", why)
	case p.lost:
		t.end(termOver) // etcd deleted the key with the session
		return 0, p.unconfirmed()
	case granted <= 0:
		// The key was put, but the session's confirmed promise ran out
		// before: nothing can be granted. The key is deleted as expired
		// (a live term would have a retry denied, naming ourselves).
		t.end(termExpired)
		return 0, p.unconfirmed()
	}
	return granted, nil
}

// renew answers Extend of the term t, recorded for g.Name with g.Token,
// at now, with p its session's promise: the duration granted, or a
// *leasestore.NotHeldError when the term is over, or (ambiguous) why the
// session cannot back a grant now.
func (tt *termTable) renew(t *term, g leasestore.Grant, d time.Duration, now time.Time, p promise) (time.Duration, error) {
	over := func(why string) (time.Duration, error) {
		return 0, termEnded(leasestore.OpExtend, g, tt.holderAfter(g.Name, g.Token), why)
	}
	switch {
	case t.state == termOver && t.why != "":
		holder := t.after
		if holder == "" {
			holder = tt.holderAfter(g.Name, g.Token)
		}
		return 0, termEnded(leasestore.OpExtend, g, holder, t.why)
	case t.state == termExpired || t.state == termOver:
		return over("term over")
	case p.lost || p.id != t.sess:
		t.end(termOver)
		return over("etcd lost the session's lease, and its keys with it")
	case t.abandoned(now, p):
		t.end(termExpired)
		return over("term not extended within its grant")
	}
	t.asked = d
	if !p.confirmedAt(now) {
		return 0, p.unconfirmed()
	}
	granted := min(d, p.until.Sub(now))
	// An earlier grant may reach further than this one (it asked more):
	// its promise stands, so the term's end only ever moves later.
	if end := now.Add(granted); end.After(t.expires) {
		t.expires = end
	}
	return granted, nil
}

// holderAfter is who created the key of name after the term token, as the
// watch saw, if anyone did.
func (tt *termTable) holderAfter(name string, token uint64) string {
	if c := tt.changed[name]; c.rev > int64(token) && c.kv != nil && c.kv.CreateRevision > int64(token) {
		return c.holder()
	}
	return ""
}

// keyEvent is one change of a key under the prefix, as the watch saw it:
// a put (created when it made the key) or a deletion.
type keyEvent struct {
	name      string
	deleted   bool
	create    int64 // the key's create revision (0 for a deletion)
	mod       int64 // the revision of the change
	lease     int64
	holder    string
	isCreated bool
}

// apply applies watched events: a term whose key was deleted, created
// again or rewritten so that it no longer records the term (termRecord)
// after the term began is over; a key created on the current session cur
// (zero: none) that no term owns is an orphan, recorded as expired for the
// store to delete.
func (tt *termTable) apply(evs []keyEvent, cur clientv3.LeaseID, now time.Time) {
	for _, ev := range evs {
		tt.changed[ev.name] = tt.change(ev, cur)
		t := tt.terms[ev.name]
		if t != nil && t.state != termUnsure && t.state != termOver && ev.mod > int64(t.token) {
			if why, after := tt.overSince(ev.name, t.holder, t.token, t.sess, cur); why != "" {
				t.endFor(termOver, why, after)
			}
		}
		if ev.isCreated {
			tt.orphan(ev.name, ev.create, ev.lease, ev.holder, 0, cur, now)
		}
	}
}

// change is the key change ev, seen while cur is the current session.
func (tt *termTable) change(ev keyEvent, cur clientv3.LeaseID) keyChange {
	if ev.deleted {
		return keyChange{rev: ev.mod}
	}
	c := keyChange{rev: ev.mod, kv: &keyValue{CreateRevision: ev.create, Lease: ev.lease, Value: []byte(ev.holder)}}
	if prev := tt.changed[ev.name]; !ev.isCreated && prev.kv != nil && prev.kv.CreateRevision == ev.create {
		c.other = prev.other // a put of a key seen created
	} else {
		// Another process's: name it when our term is lost to it (our
		// own claims are recorded as terms, holder and all).
		c.other = ev.lease != int64(cur)
	}
	return c
}

// reload applies a read of every key under the prefix at revision rev (kvs
// as keyEvents of their creation, mod their latest change): a term that
// began before rev and whose key is not there, or no longer records it,
// is over; a key on cur that no term owns is an orphan.
func (tt *termTable) reload(kvs []keyEvent, rev int64, cur clientv3.LeaseID, now time.Time) {
	present := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		present[kv.name] = true
		if kv.mod > tt.changed[kv.name].rev {
			tt.changed[kv.name] = tt.change(kv, cur)
		}
	}
	for name, t := range tt.terms {
		if !present[name] && rev > tt.changed[name].rev {
			tt.changed[name] = keyChange{rev: rev}
		}
		if (t.state == termLive || t.state == termExpired) && int64(t.token) <= rev {
			if why, after := tt.overSince(name, t.holder, t.token, t.sess, cur); why != "" {
				t.endFor(termOver, why, after)
			}
		}
	}
	for _, kv := range kvs {
		tt.orphan(kv.name, kv.create, kv.lease, kv.holder, 0, cur, now)
	}
}

// orphan records the key of name created at rev on etcd lease id with
// value holder as an expired term, for the store to delete (or a claim of
// the same holder to delete and claim again), if it is on the current
// session cur, no term owns it and no call of ours but the caller's own
// ones (mine of them) is putting it: the put of a claim that was found not
// applied, and then was. It returns the term that owns the key, if any.
func (tt *termTable) orphan(name string, rev, id int64, holder string, mine int, cur clientv3.LeaseID, now time.Time) *term {
	t := tt.terms[name]
	switch {
	case t != nil && (t.state == termUnsure || int64(t.token) == rev):
		return t // an unsure claim's key is checked by the expiry
	case cur == 0 || id != int64(cur) || tt.busy[name] > mine:
		return nil
	case tt.changed[name].kv != nil && tt.changed[name].kv.CreateRevision > rev, tt.changed[name].kv == nil && tt.changed[name].rev > rev,
		t != nil && int64(t.token) > rev:
		return nil // not the latest key of the name
	}
	t = &term{token: uint64(rev), holder: holder, sess: cur, expires: now, state: termExpired}
	tt.set(name, t)
	return t
}

// unsure records that a claim of name for holder, sent at start on
// session sess for d, may have put the key with nobody told: a retry of
// the claim adopts the key, and if none comes, the key is deleted once d
// has passed. A live term of the name is left alone, and so is an expired
// one: its key may be being deleted, and must not be adopted (a key the
// claim put meanwhile is an orphan to the watch).
func (tt *termTable) unsure(name, holder string, sess clientv3.LeaseID, start time.Time, d time.Duration) *term {
	if t := tt.terms[name]; t == nil || t.state == termOver || t.state == termUnsure {
		t = &term{holder: holder, sess: sess, expires: start.Add(d), asked: d, state: termUnsure}
		tt.set(name, t)
		return t
	}
	return nil
}

// moved records that the live term t of name had its key moved, by a
// transaction sent at start, onto the session p, its own session having
// retired, for a holder who asked for d; it returns what it grants, as
// record does (d, or less if p's promise ends sooner). The term, its token
// and its Lost channels go on: it is the same term, on another etcd lease.
func (tt *termTable) moved(name string, t *term, p promise, start time.Time, d time.Duration) (time.Duration, error) {
	t.sess, t.asked = p.id, d
	granted := min(d, p.until.Sub(start))
	switch why, after := tt.overSince(name, t.holder, t.token, t.sess, p.id); {
	case why != "":
		why += " while it was moved onto a new session"
		t.endFor(termOver, why, after)
		return 0, termEnded(leasestore.OpExtend, leasestore.Grant{Name: name, Holder: t.holder, Token: t.token}, after, why)
	case p.lost:
		t.end(termOver) // etcd deleted the key with the session
		return 0, p.unconfirmed()
	case granted <= 0:
		return 0, p.unconfirmed()
	}
	if end := start.Add(granted); end.After(t.expires) {
		t.expires = end
	}
	return granted, nil
}

// live counts the live terms on the session id.
func (tt *termTable) live(id clientv3.LeaseID) (n int) {
	for _, t := range tt.terms {
		if t.sess == id && t.state == termLive {
			n++
		}
	}
	return n
}

// endSession ends every term on the session id: etcd said its lease is
// gone, and etcd deletes a lease's keys as it ends it. It returns how many
// live terms it ended.
func (tt *termTable) endSession(id clientv3.LeaseID) (live int) {
	for _, t := range tt.terms {
		if t.sess == id && t.state != termOver {
			if t.state == termLive {
				live++
			}
			t.end(termOver)
		}
	}
	return live
}

// expiredTerm is a term whose key the store is to delete.
type expiredTerm struct {
	name string
	t    *term
}

// expired marks the live terms abandoned at now (p is the current
// session's promise) as expired and returns every term whose key is to be
// deleted: those, the ones already expired, and unsure claims past their
// duration (whose key, if it was put, nobody was promised).
func (tt *termTable) expired(now time.Time, p promise) []expiredTerm {
	var due []expiredTerm
	for name, t := range tt.terms {
		switch {
		case t.state == termLive && t.sess == p.id && t.abandoned(now, p):
			t.end(termExpired)
			fallthrough
		case t.state == termExpired, t.state == termUnsure && !now.Before(t.expires):
			due = append(due, expiredTerm{name, t})
		}
	}
	return due
}

// lostChannel returns the channel Lost gives for g, registered to close
// when its term ends (closed already if it has): nil when the table does
// not know g's term.
func (tt *termTable) lostChannel(g leasestore.Grant) chan struct{} {
	t := tt.terms[g.Name]
	if t == nil || t.state == termUnsure || t.token < g.Token {
		return nil
	}
	ch := make(chan struct{})
	if t.token > g.Token || t.state != termLive {
		close(ch)
		return ch
	}
	if t.lost == nil {
		t.lost = make(map[chan struct{}]struct{})
	}
	t.lost[ch] = struct{}{}
	return ch
}
