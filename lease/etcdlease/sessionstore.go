package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// SessionStore is a leasestore.Store on etcd for processes that hold many
// leases: every key it claims is attached to one etcd lease, its session,
// which one keep-alive stream keeps alive. Keys, values and tokens are
// Store's (prefix+name, the holder, the key's create revision), so the two
// stores can share a prefix.
//
// Extend sends nothing: it grants min(d, send time of the latest confirmed
// keep-alive + TTL − now). A term ends only when etcd says so (its key
// deleted, created again or rewritten, its session lost), when it is
// revoked, or when its holder stopped asking for it while the store could
// reach etcd; an outage ends no term (Extend is then ambiguous,
// leasestore.ErrUnconfirmed). See DESIGN.md, "SessionStore: every promise
// from one session".
//
// Choose the TTL at least three times the duration the trackers ask for
// (lease.Config.Duration × 2), so grants are never shorter than asked. A
// successor takes over the leases of a crashed process only when its
// session expires, after up to TTL.
//
// It is safe for concurrent use. Close it after the last call, before the
// client. Its parts: the session (session.go), the term table (terms.go),
// the claim batcher (claims.go) and the call slots (slots.go); mu guards
// the term table, which session is current, and the store's life.
type SessionStore struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64 // seconds asked of etcd
	opts   options
	slots  *slots
	claims claimBatcher
	log    storeLog
	calls  leasestore.Counters

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the keep-alive, watch, expiry and claim goroutines

	mu       sync.Mutex
	closed   bool
	sess     *session      // nil before the first claim and after a loss
	granting chan struct{} // closed when the grant in flight is answered
	watching bool          // the prefix watch and the expiry loop run
	terms    termTable
	closeErr error
	lastLost clientv3.LeaseID // the session lost last, if any: the next grant re-creates it
	// refusedAt is where WatchRelease starts (release.go).
	refusedAt refusals
}

// expireEvery is how often the store looks for abandoned terms.
const expireEvery = time.Second

// maxLeaseTTL is the longest TTL etcd grants, in seconds (its
// lease.MaxLeaseTTL): a longer one is refused by every grant.
const maxLeaseTTL = 9_000_000_000

// errClosed is the cause of calls made after Close: they send nothing (a
// claim's put, an adoption's move, a revoke), so it matches
// leasestore.ErrNotSent.
var errClosed = fmt.Errorf("etcdlease: session store closed (%w)", leasestore.ErrNotSent)

// NewSessionStore returns a SessionStore keeping leases under prefix (for
// example "/myapp/leases/"; it must not be empty: the store watches every
// key under it) through cli, on one etcd lease of ttl, rounded up to whole
// seconds. Nothing is sent before the first Claim. The caller owns cli and
// closes it after Close. Invalid arguments (a nil cli, or a ttl above
// etcd's maximum lease TTL, among them) give an error matching
// errors.NotValid (github.com/juju/errors).
func NewSessionStore(cli *clientv3.Client, prefix string, ttl time.Duration, opts ...Option) (*SessionStore, error) {
	switch {
	case cli == nil:
		return nil, jujuerrors.NotValidf("nil *clientv3.Client")
	case prefix == "":
		return nil, jujuerrors.NotValidf("empty prefix (must not be empty: the store watches every key under it)")
	case ttl <= 0:
		return nil, jujuerrors.NotValidf("ttl %v (must be positive)", ttl)
	case ttlFor(ttl) > maxLeaseTTL:
		return nil, jujuerrors.NotValidf("ttl %v (must be at most etcd's maximum lease TTL, %ds)", ttl, maxLeaseTTL)
	}
	o, err := newOptions(opts, true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := newStoreLog(o, prefix)
	s := &SessionStore{
		cli: cli, prefix: prefix, ttl: ttlFor(ttl), opts: o, slots: newSlots(o.maxInFlight), log: log,
		ctx: ctx, cancel: cancel, terms: newTermTable(),
	}
	s.claims.store = s
	return s, nil
}

var (
	_ leasestore.Store        = (*SessionStore)(nil)
	_ leasestore.LossNotifier = (*SessionStore)(nil)
	_ leasestore.Reporter     = (*SessionStore)(nil)
)

// StoreReport implements leasestore.Reporter, as Store.StoreReport does.
// An Extend answered from the session's promise, without a call to etcd,
// counts like any other: OK, Definitive, or Ambiguous while the session is
// unconfirmed. Calls after Close count as NotSent.
func (s *SessionStore) StoreReport() leasestore.Report { return s.calls.StoreReport() }

// Key returns the etcd key that holds the named lease.
func (s *SessionStore) Key(name string) string { return s.prefix + name }

// Claim takes the named lease for holder: a put of its key on the
// session's etcd lease if the key does not exist, nested in a transaction
// with the other claims waiting (granting the session first if there is
// none). The claims of one transaction share its revision as their token.
// The Grant's Duration is d, or less when the session's confirmed
// keep-alive promises less. When another term holds the key it returns a
// *leasestore.HeldError naming that holder. Invalid arguments give an error
// matching errors.NotValid; a claim not sent, one matching leasestore.ErrNotSent;
// any other error matches leasestore.ErrUnconfirmed.
func (s *SessionStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpClaim)
	g, err := s.claimAgain(ctx, name, holder, d)
	done(err)
	return g, err
}

func (s *SessionStore) claimAgain(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	if err := checkArgs(name, holder, d); err != nil {
		return leasestore.Grant{}, err
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

func (s *SessionStore) claim(ctx context.Context, name, holder string, d time.Duration) (g leasestore.Grant, again bool, err error) {
	defer s.busyWith(name)()
	fail := func(err error) (leasestore.Grant, bool, error) {
		return leasestore.Grant{}, false, &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: name, Holder: holder, Err: err}
	}
	r := &claimReq{ctx: ctx, name: name, holder: holder, d: d, done: make(chan struct{})}
	if err := s.claims.send(r); err != nil {
		return leasestore.Grant{}, false, err
	}
	switch {
	case r.lostSession:
		return leasestore.Grant{}, true, &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: name, Holder: holder, Err: r.err}
	case r.err != nil:
		return fail(r.err)
	case r.kv != nil:
		s.refusedAt.note(name, uint64(r.kv.CreateRevision), r.rev, 0)
		return s.claimDenied(ctx, name, holder, d, r.sess, r.start, r.kv)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantedLocked(name, holder, r.token, r.sess, r.start, d)
}

// claimDenied answers a claim whose key exists: someone else's term, ours
// from an unconfirmed claim (adopted), or ours that ran out (deleted, and
// the claim tried again).
func (s *SessionStore) claimDenied(ctx context.Context, name, holder string, d time.Duration, sess *session, start time.Time, kv *keyValue) (leasestore.Grant, bool, error) {
	held := &leasestore.HeldError{Name: name, Holder: namedHolder(kv.Value), Token: uint64(kv.CreateRevision)}
	s.mu.Lock()
	t := s.terms.terms[name]
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
		t = s.terms.orphan(name, kv.CreateRevision, kv.Lease, string(kv.Value), 1, s.currentLocked(), s.opts.clock.Now())
	}
	expired := ours && t != nil && t.state == termExpired && uint64(kv.CreateRevision) == t.token
	s.mu.Unlock()
	if !expired || s.slots.acquire(ctx) != nil {
		return leasestore.Grant{}, false, held
	}
	_, _, err := deleteTerm(ctx, s.cli, s.Key(name), string(kv.Value), uint64(kv.CreateRevision))
	s.slots.release()
	if err != nil {
		return leasestore.Grant{}, false, held
	}
	s.endTerm(name, uint64(kv.CreateRevision), termOver)
	return leasestore.Grant{}, true, held
}

// grantedLocked records the live term token of name, put at start on
// sess, and returns its grant. Called with s.mu held.
func (s *SessionStore) grantedLocked(name, holder string, token uint64, sess *session, start time.Time, d time.Duration) (leasestore.Grant, bool, error) {
	granted, err := s.terms.record(name, holder, token, sess.promise(), start, d)
	if err != nil {
		return leasestore.Grant{}, false, &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: name, Holder: holder, Token: token, Err: err}
	}
	return leasestore.Grant{Name: name, Holder: holder, Token: token, Duration: granted}, false, nil
}

// Extend renews the term g for d, or less when the session's confirmed
// keep-alive promises less, without a call to etcd for terms this store
// granted. It returns a *leasestore.NotHeldError when the term is over
// (revoked, deleted or taken over as the watch saw, abandoned by its
// holder, or its session lost) and an error matching leasestore.ErrUnconfirmed while
// the session's keep-alive is unconfirmed. A term granted by another store
// (a predecessor process) is read and, if still live, moved onto this
// store's session in a transaction guarded by its token.
func (s *SessionStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpExtend)
	g, err := s.extendTerm(ctx, g, d)
	done(err)
	return g, err
}

func (s *SessionStore) extendTerm(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	if err := checkGrant(g, d); err != nil {
		return leasestore.Grant{}, err
	}
	now := s.opts.clock.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: errClosed}
	}
	t := s.terms.terms[g.Name]
	switch {
	case t != nil && t.token == g.Token && t.state == termLive && s.isRetiredLocked(t.sess):
		s.mu.Unlock()
		return s.move(ctx, g, d, t)
	case t != nil && t.token == g.Token:
		granted, err := s.terms.renew(t, g, d, now, s.sess.promise())
		s.mu.Unlock()
		if err != nil {
			if !errors.Is(err, leasestore.ErrNotHeld) {
				err = &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
			}
			return leasestore.Grant{}, err
		}
		g.Duration = granted
		return g, nil
	case t != nil && t.token > g.Token && t.state != termUnsure:
		// The key was created again since g's term: g is over.
		s.mu.Unlock()
		return leasestore.Grant{}, recordEnded(leasestore.OpExtend, g, &keyValue{CreateRevision: int64(t.token), Lease: int64(t.sess), Value: []byte(t.holder)})
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

// adopt extends a term this store did not grant: it reads the key and, if
// the term is live, moves it onto this store's session. seen is the term
// Extend found recorded for g.Name: the grant is recorded only if it is
// still that one, in the same state (the expiry may meanwhile have taken
// the key, once on our session, for an unconfirmed claim's and be deleting
// it).
func (s *SessionStore) adopt(ctx context.Context, g leasestore.Grant, d time.Duration, seen seenTerm) (leasestore.Grant, error) {
	fail := func(err error) (leasestore.Grant, error) {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return leasestore.Grant{}, notSent(leasestore.OpExtend, g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	key := s.Key(g.Name)
	kv, _, err := get(ctx, s.cli, key)
	if err != nil {
		return fail(err)
	}
	// Another store's term is on an etcd lease of its own: any but none.
	if err := recordedTerm(leasestore.OpExtend, g, kv, nil); err != nil {
		return leasestore.Grant{}, err
	}
	sess, err := s.session(ctx)
	if err != nil {
		return fail(err)
	}
	start := s.opts.clock.Now()
	if kv.Lease != int64(sess.id) {
		resp, err := moveKey(ctx, s.cli, key, g, clientv3.LeaseID(kv.Lease), sess.id)
		if err != nil {
			return fail(err)
		}
		if !resp.Succeeded {
			if err := recordedTerm(leasestore.OpExtend, g, elseKV(resp), nil); err != nil {
				return leasestore.Grant{}, err
			}
			return fail(fmt.Errorf("key %q moved between etcd leases concurrently", key))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.terms.terms[g.Name]; t != seen.t || (t != nil && t.state != seen.state) {
		return fail(fmt.Errorf("the term of %q changed while its key was moved onto this session", g.Name))
	}
	granted, err := s.terms.record(g.Name, g.Holder, g.Token, sess.promise(), start, d)
	if err != nil {
		return fail(err)
	}
	g.Duration = granted
	return g, nil
}

// move extends the live term t of g, whose session was retired, by moving
// its key onto the current session (granting one if there is none) in a
// transaction guarded by its token and by the retired session, which a
// deposed raft leader may yet revoke; a key the revoke took first is found
// gone, and the term is over with no promise standing. See DESIGN.md,
// "Moving a term to a fresh etcd lease".
func (s *SessionStore) move(ctx context.Context, g leasestore.Grant, d time.Duration, t *term) (leasestore.Grant, error) {
	fail := func(err error) (leasestore.Grant, error) {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return leasestore.Grant{}, notSent(leasestore.OpExtend, g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	s.mu.Lock()
	old := t.sess
	s.mu.Unlock()
	sess, err := s.session(ctx)
	if err != nil {
		return fail(err)
	}
	start := s.opts.clock.Now()
	key := s.Key(g.Name)
	resp, err := moveKey(ctx, s.cli, key, g, old, sess.id)
	if err != nil {
		return fail(err)
	}
	if !resp.Succeeded {
		kv := elseKV(resp)
		s.mu.Lock()
		err := recordedTerm(leasestore.OpExtend, g, kv, s.terms.ours(sess.id, old))
		s.mu.Unlock()
		if err != nil {
			s.endTerm(g.Name, g.Token, termOver)
			return leasestore.Grant{}, err
		}
		if kv.Lease != int64(sess.id) {
			return fail(fmt.Errorf("key %q moved to etcd lease %x concurrently", key, kv.Lease))
		}
		// Moved already, by an Extend whose answer was lost.
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.terms.terms[g.Name] != t || t.state != termLive || t.sess != old {
		return fail(fmt.Errorf("the term of %q changed while its key was moved onto a new session", g.Name))
	}
	granted, err := s.terms.moved(g.Name, t, sess.promise(), start, d)
	if err != nil {
		if !errors.Is(err, leasestore.ErrNotHeld) {
			err = &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
		}
		return leasestore.Grant{}, err
	}
	g.Duration = granted
	return g, nil
}

// isRetiredLocked says whether the session id was retired. Called with
// s.mu held.
func (s *SessionStore) isRetiredLocked(id clientv3.LeaseID) bool {
	_, ok := s.terms.retired[id]
	return ok
}

// Revoke ends the term g at once: it deletes the key in a transaction
// guarded by g.Token (the session lives on for the other keys). It returns
// a *leasestore.NotHeldError when the term is already over; any other error
// matches leasestore.ErrUnconfirmed (or leasestore.ErrNotSent).
func (s *SessionStore) Revoke(ctx context.Context, g leasestore.Grant) error {
	done := s.calls.Begin(leasestore.OpRevoke)
	err := s.revoke(ctx, g)
	done(err)
	return err
}

func (s *SessionStore) revoke(ctx context.Context, g leasestore.Grant) error {
	if g.Name == "" || g.Token == 0 {
		return jujuerrors.NotValidf("grant %+v (must have a Name and a Token)", g)
	}
	if s.isClosed() {
		return &leasestore.CallError{Store: storeName, Op: leasestore.OpRevoke, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: errClosed}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return notSent(leasestore.OpRevoke, g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	deleted, kv, err := deleteTerm(ctx, s.cli, s.Key(g.Name), g.Holder, g.Token)
	if err != nil {
		return &leasestore.CallError{Store: storeName, Op: leasestore.OpRevoke, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	s.endTerm(g.Name, g.Token, termOver)
	if deleted == nil {
		return recordEnded(leasestore.OpRevoke, g, kv)
	}
	return nil
}

// Holder reads the named lease's live term as Store.Holder does.
func (s *SessionStore) Holder(ctx context.Context, name string) (leasestore.Grant, error) {
	if name == "" {
		return leasestore.Grant{}, jujuerrors.NotValidf("empty lease name")
	}
	if s.isClosed() {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName, Op: leasestore.OpRead, Name: name, Err: errClosed}
	}
	if err := s.slots.acquire(ctx); err != nil {
		return leasestore.Grant{}, notSent(leasestore.OpRead, name, "", 0, err)
	}
	defer s.slots.release()
	return readHolder(ctx, s.cli, s.Key(name), name)
}

// Lost returns a channel that is closed when the store learns that the
// term g is over: its key deleted or taken over (as the store's watch of
// the prefix sees), revoked, abandoned, or its session lost. It is closed
// at once for a term already over. It stays open once ctx ends, and costs
// no goroutine. For a term this store has not granted or extended it
// returns nil: the store does not watch it.
func (s *SessionStore) Lost(ctx context.Context, g leasestore.Grant) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.terms.lostChannel(g)
	if ch == nil {
		return nil
	}
	t := s.terms.terms[g.Name]
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
// Calls after Close fail, without a call to etcd, with an error matching
// leasestore.ErrNotSent (not leasestore.ErrUnconfirmed). Close is idempotent.
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
	s.claims.close()
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
	timer := s.opts.clock.AfterFunc(keepAliveTimeout(sess.promise().ttl), cancel)
	defer timer.Stop()
	if err := revokeLease(ctx, s.cli, sess.id); err != nil {
		return fmt.Errorf("etcdlease: session on close: %w", err)
	}
	return nil
}

// isClosed says whether Close was called.
func (s *SessionStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// currentLocked is the current session's etcd lease; zero if none. Called
// with s.mu held.
func (s *SessionStore) currentLocked() clientv3.LeaseID {
	if s.sess == nil {
		return 0
	}
	return s.sess.id
}

// endTerm ends the term of name with token, if it is the one recorded.
func (s *SessionStore) endTerm(name string, token uint64, state termState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms.endOf(name, token, state)
}

// busyWith counts a call on name in progress until the func it returns
// is called.
func (s *SessionStore) busyWith(name string) func() {
	s.mu.Lock()
	s.terms.busy[name]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.terms.busy[name]--; s.terms.busy[name] == 0 {
			delete(s.terms.busy, name)
		}
	}
}

// session returns the store's session, granting one if there is none
// (one grant at a time: concurrent claims wait for it).
func (s *SessionStore) session(ctx context.Context) (*session, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, errClosed
		case s.sess != nil:
			sess := s.sess
			s.mu.Unlock()
			return sess, nil
		case s.granting != nil:
			granting := s.granting
			s.mu.Unlock()
			select {
			case <-granting:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		granting := make(chan struct{})
		s.granting = granting
		s.mu.Unlock()
		sess, err := s.grantSession(ctx)
		s.mu.Lock()
		s.granting = nil
		close(granting)
		s.mu.Unlock()
		return sess, err
	}
}

// grantSession makes a new session and starts keeping it alive; the first one
// also starts the watch of the prefix and the expiry of terms.
func (s *SessionStore) grantSession(ctx context.Context) (*session, error) {
	sent := s.opts.clock.Now()
	resp, err := s.cli.Grant(ctx, s.ttl)
	if err != nil {
		// A lease granted without our hearing it carries no key and
		// expires by itself.
		return nil, err
	}
	sess := newSession(resp.ID, time.Duration(resp.TTL)*time.Second, sent, resp.ResponseHeader.GetRaftTerm())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.sess = sess
	// Logged before the keep-alive starts, so that no record of the
	// session comes before it (a record per session: under the lock).
	if s.lastLost != 0 {
		s.log.log(slog.LevelInfo, msgSessionRecreated, sessionAttr(sess.id), slog.Duration("ttl", sess.ttl),
			slog.String("lost", fmt.Sprintf("%x", int64(s.lastLost))))
		s.lastLost = 0
	} else {
		s.log.log(slog.LevelInfo, msgSessionGranted, sessionAttr(sess.id), slog.Duration("ttl", sess.ttl))
	}
	s.startSessionLocked(sess, resp.ResponseHeader.Revision)
	s.mu.Unlock()
	return sess, nil
}

// startSessionLocked starts keeping sess alive and, for the first session,
// the watch of the prefix (from the revision after rev, the grant's) and
// the expiry of terms. Called with s.mu held.
func (s *SessionStore) startSessionLocked(sess *session, rev int64) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Any key will do for the confirming read (it writes nothing;
		// see readCommitted); the prefix itself is
		// one nobody writes.
		sess.keepAlive(s.ctx, s.cli, s.opts.clock, s.prefix, s.log, func() { s.sessionLost(sess) }, func() { s.sessionRetired(sess) })
	}()
	if !s.watching {
		// Every key of this and later sessions is created after the
		// grant's revision: the watch from there sees all their ends.
		s.watching = true
		w := &keyWatch{cli: s.cli, clk: s.opts.clock, key: s.prefix, prefix: true, events: s.observe, resync: s.resync}
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			w.run(clientv3.WithRequireLeader(s.ctx), rev+1)
		}()
		go s.expireTerms()
	}
}

// sessionLost ends every term of sess: etcd said its lease is gone. It is
// called once per session, by whichever call learned it first.
func (s *SessionStore) sessionLost(sess *session) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	s.lastLost = sess.id
	// Under the lock, as the grant that re-creates it logs.
	s.log.log(slog.LevelWarn, msgSessionLost, sessionAttr(sess.id), slog.Int("terms", s.terms.endSession(sess.id)))
	s.mu.Unlock()
}

// sessionRetired records that sess retired (see session): later claims
// get a new session, and the live terms on it move there as they are
// extended.
func (s *SessionStore) sessionRetired(sess *session) {
	now := s.opts.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == sess {
		s.sess = nil
	}
	s.terms.retired[sess.id] = now
	s.log.log(slog.LevelInfo, msgSessionRetired, sessionAttr(sess.id), slog.Int("terms", s.terms.live(sess.id)))
}

// retiredFor is how long a retired session is remembered: its etcd lease,
// no longer kept alive, has expired by then, with every key not moved.
func retiredFor(ttl time.Duration) time.Duration { return 2 * ttl }

// observe gives the watched events of leases' keys (not steps': see
// steplog.go) to the term table.
func (s *SessionStore) observe(evs []*clientv3.Event) bool {
	kes := make([]keyEvent, 0, len(evs))
	for _, ev := range evs {
		name := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
		if isStepKey(name) {
			continue
		}
		kes = append(kes, keyEvent{
			name: name, deleted: ev.Type == mvccpb.DELETE,
			create: ev.Kv.CreateRevision, mod: ev.Kv.ModRevision, lease: ev.Kv.Lease, holder: string(ev.Kv.Value),
			isCreated: ev.Type == mvccpb.PUT && ev.Kv.CreateRevision == ev.Kv.ModRevision,
		})
	}
	now := s.opts.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms.apply(kes, s.currentLocked(), now)
	return false
}

// resync gives a read of every lease's key under the prefix, at rev, to
// the term table.
func (s *SessionStore) resync(kvs []*mvccpb.KeyValue, rev int64) bool {
	kes := make([]keyEvent, 0, len(kvs))
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), s.prefix)
		if isStepKey(name) {
			continue
		}
		kes = append(kes, keyEvent{name: name, create: kv.CreateRevision,
			mod: kv.ModRevision, lease: kv.Lease, holder: string(kv.Value), isCreated: true})
	}
	now := s.opts.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms.reload(kes, rev, s.currentLocked(), now)
	return false
}

// expireTerms deletes, every expireEvery, the keys of the terms their
// holders abandoned (and of unsure claims nobody took).
func (s *SessionStore) expireTerms() {
	defer s.wg.Done()
	for backoff.SleepUntil(s.ctx.Done(), s.opts.clock, expireEvery) {
		now := s.opts.clock.Now()
		s.mu.Lock()
		due := s.terms.expired(now, s.sess.promise())
		for id, at := range s.terms.retired {
			if now.Sub(at) > retiredFor(time.Duration(s.ttl)*time.Second) {
				delete(s.terms.retired, id)
			}
		}
		s.mu.Unlock()
		for _, x := range due {
			s.deleteExpired(x)
		}
	}
}

// deleteExpired deletes the key of an expired term, guarded by its token;
// for an unconfirmed claim, the key if it is on the claim's session. A
// failure leaves the term for the next round.
func (s *SessionStore) deleteExpired(x expiredTerm) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	timer := s.opts.clock.AfterFunc(expireEvery, cancel)
	defer timer.Stop()
	if s.slots.acquire(ctx) != nil {
		return
	}
	defer s.slots.release()
	key := s.Key(x.name)
	s.mu.Lock()
	token, state, sess, holder := x.t.token, x.t.state, x.t.sess, x.t.holder
	s.mu.Unlock()
	if state == termUnsure {
		kv, _, err := get(ctx, s.cli, key)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.terms.terms[x.name] != x.t || x.t.state != termUnsure {
			s.mu.Unlock()
			return // adopted by a claim meanwhile
		}
		if kv == nil || kv.Lease != int64(sess) {
			// The unconfirmed put was not applied.
			x.t.end(termOver)
			s.mu.Unlock()
			return
		}
		// It was: the key is ours, and nobody was granted it.
		x.t.token = uint64(kv.CreateRevision)
		x.t.end(termExpired)
		token = x.t.token
		s.mu.Unlock()
	}
	if _, _, err := deleteTerm(ctx, s.cli, key, holder, token); err != nil {
		return
	}
	s.endTerm(x.name, token, termOver)
}
