package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// SessionStore is a lease.Store on etcd for processes that hold many
// leases: every key it claims is attached to one etcd lease, its session,
// which one keep-alive stream keeps alive. Keys, values and tokens are
// Store's (prefix+name, the holder, the key's create revision), so the two
// stores can share a prefix; only the key's etcd lease differs.
//
// Claim is one put-if-absent, sent with up to 63 other claims in one
// transaction (a few transactions in flight). Extend sends nothing: it grants
// min(d, send time of the latest confirmed keep-alive + TTL − now), so a
// grant never reaches past what etcd promised, and it knows the key still
// carries the term's token from a watch of the prefix. Steady-state traffic
// is therefore one keep-alive message every TTL/3 whatever the number of
// leases. A term not extended within its granted duration is over: the
// store deletes its key (guarded by the token) within about a second.
//
// The session is shared fate. When etcd answers a keep-alive "no such
// lease" (the process was cut off for longer than the TTL), every term is
// definitively over (lease.ErrNotHeld) and the next Claim grants a new
// session; while a keep-alive is unconfirmed, every Extend is ambiguous
// (ErrUnconfirmed). Choose the TTL at least three times the duration the
// trackers ask for (lease.Config.Duration × 2): keep-alives go every TTL/3,
// so grants are then never shorter than asked. A successor takes over the
// leases of a crashed process only when its session expires, after up to
// TTL.
//
// It is safe for concurrent use. Close it after the last call, before the
// client.
type SessionStore struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64 // seconds asked of etcd
	opts   options
	slots  *slots

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the keep-alive, watch and expiry goroutines

	mu       sync.Mutex
	closed   bool
	sess     *session         // nil before the first claim and after a loss
	granting chan struct{}    // closed when the grant in flight is answered
	claims   []*claimReq      // waiting to be sent, the newest last
	senders  int              // goroutines sending claims
	watching bool             // the prefix watch and the expiry loop run
	terms    map[string]*term // by lease name
	// changed is, by lease name, the latest revision at which the watch
	// saw the key deleted or created (or, after a resync, absent): a term
	// whose token is older is over, even if it is recorded only after the
	// watch saw that.
	changed map[string]int64
	// busy counts, by lease name, the claims and adoptions in progress:
	// a key of ours they may have put is not yet recorded as a term.
	busy     map[string]int
	closeErr error
}

// session is one etcd lease that carries the store's keys. Its fields are
// guarded by SessionStore.mu.
type session struct {
	id  clientv3.LeaseID
	ttl time.Duration // as etcd granted or last renewed it
	// until is when etcd's promise ends at the earliest: the send time of
	// the latest confirmed keep-alive (or of the grant) plus the TTL.
	until time.Time
	// err is why the latest keep-alive was not confirmed; nil once one is.
	err error
	// reachable is the send time of the first keep-alive confirmed after
	// a time the session was not confirmed (zero if it always was): the
	// store has been able to reach etcd since.
	reachable time.Time
	lost      bool // etcd said the lease is gone
}

// confirmed says whether etcd's promise for the session stands at now: the
// latest keep-alive was confirmed, and the promise has not run out.
func (sess *session) confirmed(now time.Time) bool {
	return sess.err == nil && now.Before(sess.until)
}

type termState int

const (
	termLive    termState = iota
	termUnsure            // a claim whose transaction was unconfirmed: token unknown
	termExpired           // not extended in time; its key is yet to be deleted
	termOver              // over, and its key gone (or someone else's)
)

// term is a claim this store made, keyed by lease name. It stays in the map
// after it ends (a few bytes per name), so that Extend of an ended term is
// answered without a read.
type term struct {
	token   uint64 // create revision of the key; 0 while termUnsure
	holder  string
	sess    *session
	expires time.Time // the end of the latest grant, on the store's clock
	// asked is the duration the holder asked for last (its claim's or its
	// latest Extend's, answered or not).
	asked time.Duration
	state termState
	lost  map[chan struct{}]struct{} // Lost channels to close when it ends
}

// abandoned says whether the holder of the live term t stopped asking for
// it while the store could reach etcd: the session is confirmed at now,
// and neither the latest grant nor the holder's latest ask since the store
// could reach etcd again reaches now. An outage alone never abandons a
// term: while the session is unconfirmed nothing is, and once etcd answers
// again a holder that kept asking through it asks again within its
// duration. Called with SessionStore.mu held.
func (t *term) abandoned(now time.Time) bool {
	return t.sess.confirmed(now) && !now.Before(t.expires) && !now.Before(t.sess.reachable.Add(t.asked))
}

// end marks t over (or expired, when its key is still to be deleted) and
// closes its Lost channels. Called with SessionStore.mu held.
func (t *term) end(state termState) {
	t.state = state
	for ch := range t.lost {
		close(ch)
	}
	t.lost = nil
}

// Keep-alive and expiry timing, as fractions of the session's TTL.
const (
	keepAliveEvery = 3 // a keep-alive every TTL/3
	// A keep-alive not answered within TTL/keepAliveWait (at most
	// maxKeepAliveWait) is unconfirmed: the stream is reopened.
	keepAliveWait    = 6
	maxKeepAliveWait = 5 * time.Second
	// expireEvery is how often the store looks for terms that ran out.
	expireEvery = time.Second
)

// errClosed is the cause of calls made after Close.
var errClosed = errors.New("etcdlease: session store closed")

// NewSessionStore returns a SessionStore keeping leases under prefix (for
// example "/myapp/leases/"; it must not be empty: the store watches every
// key under it) through cli, on one etcd lease of ttl, rounded up to whole
// seconds. Nothing is sent before the first Claim. The caller owns cli and
// closes it after Close. Invalid arguments give an error matching
// errors.NotValid (github.com/juju/errors).
func NewSessionStore(cli *clientv3.Client, prefix string, ttl time.Duration, opts ...Option) (*SessionStore, error) {
	switch {
	case cli == nil:
		return nil, jujuerrors.NotValidf("nil *clientv3.Client")
	case prefix == "":
		return nil, jujuerrors.NotValidf("empty prefix (must not be empty: the store watches every key under it)")
	case ttl <= 0:
		return nil, jujuerrors.NotValidf("ttl %v (must be positive)", ttl)
	}
	o, err := newOptions(opts, true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &SessionStore{
		cli: cli, prefix: prefix, ttl: ttlFor(ttl), opts: o, slots: newSlots(o.maxInFlight),
		ctx: ctx, cancel: cancel, terms: make(map[string]*term), changed: make(map[string]int64), busy: make(map[string]int),
	}, nil
}

var (
	_ lease.Store        = (*SessionStore)(nil)
	_ lease.LossNotifier = (*SessionStore)(nil)
)

// Key returns the etcd key that holds the named lease.
func (s *SessionStore) Key(name string) string { return s.prefix + name }

// Claim takes the named lease for holder: a put of its key on the
// session's etcd lease if the key does not exist, nested in a transaction
// with the other claims waiting (granting the session first if there is
// none). The claims of one transaction share its revision as their token. The Grant's Duration is d, or less when
// the session's confirmed keep-alive promises less. When another term holds
// the key it returns a *lease.HeldError naming that holder. Invalid
// arguments give an error matching errors.NotValid; any other error
// matches ErrUnconfirmed (and lease.ErrNotSent if the claim was not sent).
func (s *SessionStore) Claim(ctx context.Context, name, holder string, d time.Duration) (lease.Grant, error) {
	if err := checkArgs(name, holder, d); err != nil {
		return lease.Grant{}, err
	}
	// A second attempt follows a lost session (etcd had expired it) or
	// the deletion of our own term that had run out.
	for attempt := 0; ; attempt++ {
		g, again, err := s.claim(ctx, name, holder, d)
		if !again || attempt == 1 {
			return g, err
		}
	}
}

func (s *SessionStore) claim(ctx context.Context, name, holder string, d time.Duration) (g lease.Grant, again bool, err error) {
	defer s.busyWith(name)()
	fail := func(err error) (lease.Grant, bool, error) {
		return lease.Grant{}, false, &OpError{Op: "claim", Name: name, Holder: holder, Err: err}
	}
	r := &claimReq{ctx: ctx, name: name, holder: holder, d: d, done: make(chan struct{})}
	if err := s.sendClaim(r); err != nil {
		return lease.Grant{}, false, err
	}
	switch {
	case r.lostSession:
		return lease.Grant{}, true, &OpError{Op: "claim", Name: name, Holder: holder, Err: r.err}
	case r.err != nil:
		return fail(r.err)
	case r.kv != nil:
		return s.claimDenied(ctx, name, holder, d, r.sess, r.start, r.kv)
	}
	return s.granted(name, holder, r.token, r.sess, r.start, d)
}

// claimDenied answers a claim whose key exists: someone else's term, ours
// from an unconfirmed claim (adopted), or ours that ran out (deleted, and
// the claim tried again).
func (s *SessionStore) claimDenied(ctx context.Context, name, holder string, d time.Duration, sess *session, start time.Time, kv *keyValue) (lease.Grant, bool, error) {
	if kv == nil {
		// Deleted between the compare and the read: cannot be, the
		// transaction is atomic; report it as unconfirmed anyway.
		return lease.Grant{}, false, &OpError{Op: "claim", Name: name, Holder: holder, Err: errors.New("key gone after a failed create compare")}
	}
	held := &lease.HeldError{Name: name, Holder: string(kv.Value)}
	s.mu.Lock()
	t := s.terms[name]
	ours := kv.Lease == int64(sess.id)
	if ours && t != nil && t.state == termUnsure && string(kv.Value) == holder {
		// The put of our unconfirmed claim was applied; nobody was
		// promised anything by it, so this claim takes it. Decided and
		// recorded under one lock: the expiry, which may take the same
		// term to delete its key, sees either the unsure term or ours.
		defer s.mu.Unlock()
		return s.grantedLocked(name, holder, uint64(kv.CreateRevision), sess, start, d)
	}
	if ours {
		// If no term owns our key, and no other call of ours is putting
		// it, it is an orphan: deleted, and the claim tried again.
		t = s.orphanLocked(name, kv.CreateRevision, kv.Lease, kv.Value, 1)
	}
	expired := ours && t != nil && t.state == termExpired && uint64(kv.CreateRevision) == t.token
	s.mu.Unlock()
	if !expired || s.slots.acquire(ctx) != nil {
		return lease.Grant{}, false, held
	}
	_, _, err := deleteTerm(ctx, s.cli, s.Key(name), uint64(kv.CreateRevision))
	s.slots.release()
	if err != nil {
		return lease.Grant{}, false, held
	}
	s.endTerm(name, uint64(kv.CreateRevision), termOver)
	return lease.Grant{}, true, held
}

// granted records the live term token and returns its grant: d, or less if
// the session's promise ends sooner.
func (s *SessionStore) granted(name, holder string, token uint64, sess *session, start time.Time, d time.Duration) (lease.Grant, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantedLocked(name, holder, token, sess, start, d)
}

// grantedLocked is granted with s.mu held.
func (s *SessionStore) grantedLocked(name, holder string, token uint64, sess *session, start time.Time, d time.Duration) (lease.Grant, bool, error) {
	grant := min(d, sess.until.Sub(start))
	t := &term{token: token, holder: holder, sess: sess, expires: start.Add(max(grant, 0)), asked: d}
	s.setTermLocked(name, t)
	if s.changed[name] > int64(token) {
		// The watch saw the key deleted or created again after this
		// term began, before the term was recorded.
		t.end(termOver)
		return lease.Grant{}, false, &OpError{Op: "claim", Name: name, Holder: holder, Token: token,
			Err: errors.New("term ended as soon as it began: key deleted or created again")}
	}
	if grant <= 0 || sess.lost {
		// The key was put, but the session's confirmed promise ran out
		// before: nothing can be granted. The key is deleted as expired
		// (a live term would have a retry denied, naming ourselves).
		if sess.lost {
			t.end(termOver) // etcd deleted the key with the session
		} else {
			t.end(termExpired)
		}
		return lease.Grant{}, false, &OpError{Op: "claim", Name: name, Holder: holder, Err: s.unconfirmedLocked(sess)}
	}
	return lease.Grant{Name: name, Holder: holder, Token: token, Duration: grant}, false, nil
}

// Extend renews the term g for d, or less when the session's confirmed
// keep-alive promises less, without a call to etcd for terms this store
// granted. It returns an error matching lease.ErrNotHeld when the term is
// over (revoked, deleted or taken over as the watch saw, not extended
// within its grant, or its session lost) and one matching ErrUnconfirmed
// while the session's keep-alive is unconfirmed. A term granted by another
// store (a predecessor process) is read and, if still live, moved onto this
// store's session in a transaction guarded by its token.
func (s *SessionStore) Extend(ctx context.Context, g lease.Grant, d time.Duration) (lease.Grant, error) {
	if err := checkGrant(g, d); err != nil {
		return lease.Grant{}, err
	}
	now := s.opts.clock.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return lease.Grant{}, &OpError{Op: "extend", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: errClosed}
	}
	t := s.terms[g.Name]
	switch {
	case t != nil && t.token == g.Token:
		defer s.mu.Unlock()
		return s.extendLocked(t, g, d, now)
	case t != nil && t.token > g.Token && t.state != termUnsure:
		// The key was created again since g's term: g is over.
		s.mu.Unlock()
		return lease.Grant{}, notHeld("extend", g, &keyValue{CreateRevision: int64(t.token), Value: []byte(t.holder)})
	}
	seen := seenTerm{t: t}
	if t != nil {
		seen.state = t.state
	}
	s.mu.Unlock()
	defer s.busyWith(g.Name)()
	return s.adopt(ctx, g, d, seen)
}

// seenTerm is the term of a lease name as a call saw it, and its state then.
type seenTerm struct {
	t     *term
	state termState
}

// unchangedLocked says whether the term of name is still the one seen, in
// the same state. Called with s.mu held.
func (s *SessionStore) unchangedLocked(name string, seen seenTerm) bool {
	t := s.terms[name]
	return t == seen.t && (t == nil || t.state == seen.state)
}

func (s *SessionStore) extendLocked(t *term, g lease.Grant, d time.Duration, now time.Time) (lease.Grant, error) {
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &OpError{Op: "extend", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	over := func(why string) (lease.Grant, error) {
		return lease.Grant{}, termEnded("extend", g, "", why)
	}
	switch {
	case t.state == termExpired || t.state == termOver:
		return over("term over")
	case t.sess.lost:
		t.end(termOver)
		return over("etcd lost the session's lease, and its keys with it")
	case t.abandoned(now):
		t.end(termExpired)
		return over("term not extended within its grant")
	}
	t.asked = d
	if !t.sess.confirmed(now) {
		return fail(s.unconfirmedLocked(t.sess))
	}
	grant := min(d, t.sess.until.Sub(now))
	if grant <= 0 {
		return fail(s.unconfirmedLocked(t.sess))
	}
	// An earlier grant may reach further than this one (it asked more):
	// its promise stands, so the term's end only ever moves later.
	if end := now.Add(grant); end.After(t.expires) {
		t.expires = end
	}
	g.Duration = grant
	return g, nil
}

// unconfirmedLocked says why the session cannot back a grant now.
func (s *SessionStore) unconfirmedLocked(sess *session) error {
	if sess.err != nil {
		return fmt.Errorf("session keep-alive unconfirmed: %w", sess.err)
	}
	return fmt.Errorf("no session keep-alive confirmed since %v", sess.until.Add(-sess.ttl))
}

// adopt extends a term this store did not grant: it reads the key and, if
// the term is live, moves it onto this store's session. seen is the term
// Extend found recorded for g.Name: the grant is recorded only if it is
// still that one, in the same state (the expiry may meanwhile have taken
// the key, once on our session, for an unconfirmed claim's and be deleting
// it).
func (s *SessionStore) adopt(ctx context.Context, g lease.Grant, d time.Duration, seen seenTerm) (lease.Grant, error) {
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &OpError{Op: "extend", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return lease.Grant{}, notSent("extend", g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	key := s.Key(g.Name)
	kv, _, err := get(ctx, s.cli, key)
	if err != nil {
		return fail(err)
	}
	if kv == nil || uint64(kv.CreateRevision) != g.Token {
		return lease.Grant{}, notHeld("extend", g, kv)
	}
	sess, err := s.session(ctx)
	if err != nil {
		return fail(err)
	}
	start := s.opts.clock.Now()
	if kv.Lease != int64(sess.id) {
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(g.Token)),
				clientv3.Compare(clientv3.LeaseValue(key), "=", kv.Lease)).
			Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(sess.id))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fail(err)
		}
		if !resp.Succeeded {
			if kv := elseKV(resp); kv == nil || uint64(kv.CreateRevision) != g.Token {
				return lease.Grant{}, notHeld("extend", g, kv)
			}
			return fail(fmt.Errorf("key %q moved between etcd leases concurrently", key))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unchangedLocked(g.Name, seen) {
		return fail(fmt.Errorf("the term of %q changed while its key was moved onto this session", g.Name))
	}
	g, _, err = s.grantedLocked(g.Name, g.Holder, g.Token, sess, start, d)
	return g, err
}

// Revoke ends the term g at once: it deletes the key in a transaction
// guarded by g.Token (the session lives on for the other keys). It returns
// an error matching lease.ErrNotHeld when the term is already over; any
// other error matches ErrUnconfirmed (or lease.ErrNotSent).
func (s *SessionStore) Revoke(ctx context.Context, g lease.Grant) error {
	if g.Name == "" || g.Token == 0 {
		return jujuerrors.NotValidf("grant %+v (must have a Name and a Token)", g)
	}
	if s.isClosed() {
		return &OpError{Op: "revoke", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: errClosed}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return notSent("revoke", g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	deleted, kv, err := deleteTerm(ctx, s.cli, s.Key(g.Name), g.Token)
	if err != nil {
		return &OpError{Op: "revoke", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	s.endTerm(g.Name, g.Token, termOver)
	if deleted == nil {
		return notHeld("revoke", g, kv)
	}
	return nil
}

// Holder reads the named lease's live term as Store.Holder does.
func (s *SessionStore) Holder(ctx context.Context, name string) (lease.Grant, error) {
	if name == "" {
		return lease.Grant{}, jujuerrors.NotValidf("empty lease name")
	}
	if s.isClosed() {
		return lease.Grant{}, &OpError{Op: "read", Name: name, Err: errClosed}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return lease.Grant{}, notSent("read", name, "", 0, err)
	}
	defer s.slots.release()
	return readHolder(ctx, s.cli, s.Key(name), name)
}

// Lost returns a channel that is closed when the store learns that the
// term g is over: its key deleted or taken over (as the store's watch of
// the prefix sees), revoked, not extended in time, or its session lost. It
// is closed at once for a term already over. It stays open once ctx ends,
// and costs no goroutine. For a term this store has not granted or
// extended it returns nil: the store does not watch it.
func (s *SessionStore) Lost(ctx context.Context, g lease.Grant) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.terms[g.Name]
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
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(t.lost, ch)
		s.mu.Unlock()
	})
	return ch
}

// Close stops the keep-alive, the watch and the expiry of terms, and waits
// for them. The keys then expire with the session's TTL, unless the store
// was made WithRevokeOnClose, when Close revokes the session (bounded by
// the keep-alive's wait) and returns the error if etcd did not confirm it:
// every key of the store goes at once, so close every tracker on the store
// first (a tracker still running holds a grant that would be cut short).
// Calls after Close fail with an error matching ErrUnconfirmed, without a
// call to etcd. Close is idempotent.
func (s *SessionStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	sess := s.sess
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var err error
	if s.opts.revokeOnClose && sess != nil {
		err = s.revokeSession(sess)
	}
	s.mu.Lock()
	s.closeErr = err
	s.mu.Unlock()
	return err
}

func (s *SessionStore) revokeSession(sess *session) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := s.opts.clock.AfterFunc(keepAliveTimeout(sess.ttl), cancel)
	defer timer.Stop()
	if _, err := s.cli.Revoke(ctx, sess.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdlease: revoke session lease %x on close: %w", sess.id, err)
	}
	return nil
}

// isClosed says whether Close was called.
func (s *SessionStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// setTermLocked records t as the term of name, replacing (and ending) the
// one before it. Called with s.mu held.
func (s *SessionStore) setTermLocked(name string, t *term) {
	if old := s.terms[name]; old != nil && old != t {
		old.end(termOver)
	}
	s.terms[name] = t
}

// endTerm ends the term of name with token, if it is the one recorded.
func (s *SessionStore) endTerm(name string, token uint64, state termState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.terms[name]; t != nil && t.token == token {
		t.end(state)
	}
}

// observe applies watched events: a term whose key was deleted or created
// again after the term began is over; a key created on our session that no
// term owns is an orphan.
func (s *SessionStore) observe(evs []*clientv3.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		name := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
		created := ev.Type == mvccpb.PUT && ev.Kv.CreateRevision == ev.Kv.ModRevision
		if ev.Type == mvccpb.DELETE || created {
			s.changed[name] = ev.Kv.ModRevision
		}
		t := s.terms[name]
		if t != nil && t.state != termUnsure && t.state != termOver && ev.Kv.ModRevision > int64(t.token) &&
			(ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != int64(t.token)) {
			t.end(termOver)
		}
		if created {
			s.orphanLocked(name, ev.Kv.CreateRevision, ev.Kv.Lease, ev.Kv.Value, 0)
		}
	}
	return false
}

// resync applies a read of every key under the prefix at revision rev: a
// term that began before rev and whose key is not there is over; a key on
// our session that no term owns is an orphan.
func (s *SessionStore) resync(kvs []*mvccpb.KeyValue, rev int64) bool {
	present := make(map[string]int64, len(kvs))
	for _, kv := range kvs {
		present[strings.TrimPrefix(string(kv.Key), s.prefix)] = kv.CreateRevision
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, created := range present {
		s.changed[name] = max(s.changed[name], created)
	}
	for name, t := range s.terms {
		if _, ok := present[name]; !ok {
			s.changed[name] = rev
		}
		if (t.state == termLive || t.state == termExpired) && int64(t.token) <= rev && present[name] != int64(t.token) {
			t.end(termOver)
		}
	}
	for _, kv := range kvs {
		s.orphanLocked(strings.TrimPrefix(string(kv.Key), s.prefix), kv.CreateRevision, kv.Lease, kv.Value, 0)
	}
	return false
}

// orphanLocked records the key of name created at rev on etcd lease id
// with value holder as an expired term, for the expiry to delete (or a
// claim of the same holder to delete and claim again), if it is on our
// current session, no term owns it and no call of ours but the caller's
// own ones (mine of them) is putting it: the put of a claim that was found
// not applied, and then was. It returns the term that owns the key, if
// any. Called with s.mu held.
func (s *SessionStore) orphanLocked(name string, rev, id int64, holder []byte, mine int) *term {
	t := s.terms[name]
	switch {
	case t != nil && (t.state == termUnsure || int64(t.token) == rev):
		return t // an unsure claim's key is checked by the expiry
	case s.sess == nil || id != int64(s.sess.id) || s.busy[name] > mine:
		return nil
	case s.changed[name] > rev || (t != nil && int64(t.token) > rev):
		return nil // not the latest key of the name
	}
	t = &term{token: uint64(rev), holder: string(holder), sess: s.sess, expires: s.opts.clock.Now(), state: termExpired}
	s.setTermLocked(name, t)
	return t
}

// busyWith counts a call on name in progress until the func it returns
// is called.
func (s *SessionStore) busyWith(name string) func() {
	s.mu.Lock()
	s.busy[name]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.busy[name]--; s.busy[name] == 0 {
			delete(s.busy, name)
		}
	}
}
