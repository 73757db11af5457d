package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Store is a leasestore.Store on etcd. Each lease is one key, prefix+name, whose
// value is the holder and which is attached to an etcd lease with the
// granted TTL; the term's fencing token is the key's create revision.
//
// etcd alone decides expiry (on its raft leader's clock): a key whose etcd lease
// is not kept alive is deleted by etcd after its TTL, whether or not this
// process is still running.
//
// The Store keeps only a cache of which etcd lease each live term uses; the
// key itself records it, so a Store restarted with an empty cache still
// extends and revokes the grants of its predecessor. It is safe for
// concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
	opts   options
	slots  *slots // the one bound on calls in flight
	calls  leasestore.Counters
	// admission decides whether a claim may take a new term.
	admission admission

	mu sync.Mutex
	// leases caches token -> etcd lease of terms this Store granted or
	// extended, and the end of those it found over. A miss is answered by
	// reading the key, so entries may be dropped at any time; a term
	// revoked is pruned, one found over is kept as its end (so that a
	// term this Store said is over is never extended again, even if its
	// key, rewritten by another client, looks alive to a fresh read).
	leases map[uint64]cachedLease
	// moving is, by token, the etcd leases a relet of the term is moving
	// its key to, from before its transaction is sent until the cache
	// records the outcome: the key seen on one of them was moved by this
	// Store, not by another client (see leaseOurs).
	moving map[uint64][]clientv3.LeaseID
	// unsure is, by token, the etcd lease a relet of the term sent its
	// key to without learning whether it got there (its answer was
	// lost): a key found on it was moved by this Store, and the next
	// Extend follows it there (see followMove).
	unsure map[uint64]clientv3.LeaseID
	// orphans are etcd leases the Store no longer wants and could not
	// revoke yet (see orphan); the next Claim revokes them first.
	orphans []clientv3.LeaseID
	// refusedAt is where WatchRelease starts (release.go).
	refusedAt refusals
	// spare is the etcd lease granted for the claim a release wakes
	// (spare.go); nil if none.
	spare *spareLease
	// live is the count of leases whose confirmed renewal reaches past
	// countedAt, plus those cached since (see liveTerms).
	live      int
	countedAt time.Time
}

// cachedLease is the etcd lease of the term of name with some token, and
// what the Store knows of its life: the raft term it was granted or last
// renewed in, as confirmed (see confirmedInRaftTerm), and the send time of
// that grant or renewal, on the Store's clock, for a TTL of ttl. Extend
// resumes the etcd lease only while both still hold (see resumable).
type cachedLease struct {
	name string
	id   clientv3.LeaseID
	leaseLife
	// lateWait is the longest a keep-alive of the lease waited for a call
	// slot, since it was last confirmed, when that was late (see
	// admission); zero if none was.
	lateWait time.Duration
	// over, if not nil, is the term's end as the Store answered it (a
	// *leasestore.NotHeldError): the entry caches no etcd lease.
	over error
	// spare says the etcd lease is a spare (spare.go), granted a second
	// longer than the claim asked: the term's first renewal moves it to a
	// fresh etcd lease of the TTL asked.
	spare bool
}

const (
	maxOrphans = 64
	// maxCached bounds the cache for callers that abandon grants without
	// revoking them; when full it is emptied, which costs each live term
	// one extra read on its next Extend. It is sized for a controller's
	// tens of thousands of leases (an entry is ~50 bytes).
	maxCached = 1 << 16
)

// NewStore returns a Store keeping leases under prefix (for example
// "/coldstart/lease/") through cli. The caller owns cli and closes it after
// the last call; the Store itself has nothing to close. Configure cli with
// every member's endpoint so that a call can fail over to a surviving
// quorum. At most DefaultMaxInFlight calls (see WithMaxInFlight) go to
// etcd at once. A nil cli, or an option that applies only to a
// SessionStore (WithRevokeOnClose), gives an error matching
// errors.NotValid (github.com/juju/errors).
func NewStore(cli *clientv3.Client, prefix string, opts ...Option) (*Store, error) {
	if cli == nil {
		return nil, jujuerrors.NotValidf("nil *clientv3.Client")
	}
	o, err := newOptions(opts, false)
	if err != nil {
		return nil, err
	}
	return &Store{
		cli: cli, prefix: prefix, opts: o, slots: newSlots(o.maxInFlight),
		admission: admission{slots: o.maxInFlight},
		leases:    make(map[uint64]cachedLease), moving: make(map[uint64][]clientv3.LeaseID),
		unsure: make(map[uint64]clientv3.LeaseID),
	}, nil
}

var (
	_ leasestore.Store        = (*Store)(nil)
	_ leasestore.LossNotifier = (*Store)(nil)
	_ leasestore.Reporter     = (*Store)(nil)
)

// StoreReport implements leasestore.Reporter: the Store's calls of Claim,
// Extend and Revoke so far by the class of their answer (a call not sent,
// ErrOverCapacity among them, is NotSent; one matching leasestore.ErrUnconfirmed is
// Ambiguous), and the calls in flight, including those waiting for a call
// slot. Holder is not counted.
func (s *Store) StoreReport() leasestore.Report { return s.calls.StoreReport() }

// Key returns the etcd key that holds the named lease.
func (s *Store) Key(name string) string { return s.prefix + name }

// Claim takes the named lease for holder for at least d, rounded up to whole
// seconds (etcd may raise it further to its minimum TTL); the returned
// Grant's Duration is the TTL etcd granted. When another term holds the key
// it returns a *leasestore.HeldError naming that holder and the term; once a
// claim of the name was refused, the next reads the key first (one read,
// no write, while a follower waits), until WatchRelease saw that term end.
// While the Store is over capacity (see ErrOverCapacity) it refuses the
// claim, after waiting an eighth of the TTL or until ctx ends, with an
// error matching ErrOverCapacity and leasestore.ErrNotSent. Invalid arguments
// give an error matching errors.NotValid (github.com/juju/errors); any
// other error matches leasestore.ErrUnconfirmed (and leasestore.ErrNotSent if the
// claim was not sent).
func (s *Store) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpClaim)
	g, err := s.claim(ctx, name, holder, d)
	done(err)
	return g, err
}

func (s *Store) claim(ctx context.Context, name, holder string, d time.Duration) (_ leasestore.Grant, err error) {
	if err := checkArgs(name, holder, d); err != nil {
		return leasestore.Grant{}, err
	}
	// A claim a release woke finds its etcd lease granted, or on its
	// way; it waits for it before it takes a call slot (spare.go).
	s.awaitSpare(ctx, ttlFor(d))
	release, err := s.admit(ctx, name, holder, time.Duration(ttlFor(d))*time.Second)
	if err != nil {
		return leasestore.Grant{}, err
	}
	defer release()
	defer func(start time.Time) {
		if answered(err) {
			s.admission.claimed(s.opts.clock.Now().Sub(start))
		}
	}(s.opts.clock.Now())
	s.revokeOrphans(ctx)
	if s.refusedAt.refused(name) {
		// A follower's claim, most likely refused again: one read tells,
		// where a refusal was three writes (see DESIGN.md, "Store
		// admission: no new term it cannot renew").
		resp, err := s.cli.Get(ctx, s.Key(name))
		if err != nil {
			return leasestore.Grant{}, claimError(name, holder, err)
		}
		if len(resp.Kvs) > 0 {
			return leasestore.Grant{}, s.heldBy(name, resp.Kvs[0], resp.Header.Revision, ttlFor(d))
		}
	}
	return s.put(ctx, name, holder, d)
}

// claimError is the ambiguous error of a claim of name for holder.
func claimError(name, holder string, err error) error {
	return &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: name, Holder: holder, Err: err}
}

// put puts the key of name on an etcd lease of ceil(d) seconds, for
// holder, if the key does not exist: the claim's etcd calls, on the call
// slot it holds. The etcd lease is a fresh grant, or the spare a release
// had granted for this claim (spare.go); the promise runs from the grant's
// send time either way.
func (s *Store) put(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	key := s.Key(name)
	start := s.opts.clock.Now()
	id, life, spare, err := s.leaseFor(ctx, ttlFor(d), start)
	if err != nil {
		// A lease granted without our hearing it has no keys and expires
		// by itself.
		return leasestore.Grant{}, claimError(name, holder, err)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(id))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		// The put may have been applied, on this lease.
		s.orphan(ctx, id)
		return leasestore.Grant{}, claimError(name, holder, err)
	}
	if !resp.Succeeded {
		s.orphan(ctx, id)
		if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			return leasestore.Grant{}, s.heldBy(name, rr.Kvs[0], resp.Header.Revision, ttlFor(d))
		}
		return leasestore.Grant{}, &leasestore.HeldError{Name: name}
	}
	s.refusedAt.forget(name)
	// The transaction made exactly one revision: the key's create revision.
	token := uint64(resp.Header.Revision)
	// A new token: never found over.
	_ = s.remember(name, token, cachedLease{id: id, leaseLife: life, spare: spare})
	granted := life.ttl
	if spare {
		// The TTL asked, which the spare still has left from start (see
		// takeSpare), not the second more it was granted.
		granted = time.Duration(ttlFor(d)) * time.Second
	}
	return leasestore.Grant{Name: name, Holder: holder, Token: token, Duration: granted}, nil
}

// leaseFor returns the etcd lease of ttl seconds for a claim that started
// at start, and its life: the young spare a release granted for it (spare),
// if there is one, else a fresh grant.
func (s *Store) leaseFor(ctx context.Context, ttl int64, start time.Time) (_ clientv3.LeaseID, _ leaseLife, spare bool, _ error) {
	if sp, ok := s.takeSpare(ttl, start); ok {
		return sp.id, sp.leaseLife, true, nil
	}
	sent := s.opts.clock.Now()
	gr, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, leaseLife{}, false, err
	}
	return gr.ID, leaseLife{raftTerm: gr.ResponseHeader.GetRaftTerm(), confirmed: sent, ttl: time.Duration(gr.TTL) * time.Second}, false, nil
}

// Extend keeps the term g alive: one keep-alive of its etcd lease, then a
// committed read confirming the key still records the term, answered in
// the same raft term (see DESIGN.md, "When a keep-alive counts: confirmed
// in the same raft term"). The returned Duration is the etcd lease's TTL,
// which may exceed d; when d is longer, or the keep-alive may not resume
// the etcd lease, Extend moves the key to a fresh etcd lease of ceil(d)
// seconds, keeping the token. It returns a *leasestore.NotHeldError when a
// linearizable read finds the key gone, another term's or rewritten by
// another client (a keep-alive's "no such lease" alone ends nothing),
// matching ErrOverCapacity too when the etcd lease ran out while its
// keep-alives waited for call slots; any other error matches
// leasestore.ErrUnconfirmed (or leasestore.ErrNotSent, ErrOverCapacity
// among them, if the call was not sent). Renewals take the call slots
// before claims, the oldest term first.
func (s *Store) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	done := s.calls.Begin(leasestore.OpExtend)
	g, err := s.extend(ctx, g, d)
	done(err)
	return g, err
}

// renewal is what an Extend knows of the etcd lease it keeps alive: its
// ID, the Store's cache entry of it (known, if ok) and when the Extend had
// its call slot (first).
type renewal struct {
	id    clientv3.LeaseID
	known cachedLease
	ok    bool
	first time.Time
}

// extend is Extend, uncounted.
func (s *Store) extend(ctx context.Context, g leasestore.Grant, d time.Duration) (_ leasestore.Grant, err error) {
	if err := checkGrant(g, d); err != nil {
		return leasestore.Grant{}, err
	}
	if err := s.overErr(g.Name, g.Token); err != nil {
		return leasestore.Grant{}, err
	}
	want := ttlFor(d)
	var r renewal
	r.known, r.ok = s.cached(g.Name, g.Token)
	if err := s.renewalSlot(ctx, g, want, &r); err != nil {
		return leasestore.Grant{}, err
	}
	defer s.slots.release()
	var period time.Duration // since the lease's last confirmed renewal
	if r.ok {
		period = r.first.Sub(r.known.confirmed)
	}
	defer func() {
		if answered(err) {
			s.admission.renewed(s.opts.clock.Now().Sub(r.first), period)
		}
	}()
	r.id = r.known.id
	if !r.ok {
		// Not granted by this Store (or forgotten): the key says which
		// etcd lease carries the term, if the term is still alive.
		kv, _, err := get(ctx, s.cli, s.Key(g.Name))
		if err != nil {
			return leasestore.Grant{}, extendError(g, err)
		}
		if err := recordedTerm(leasestore.OpExtend, g, kv, nil); err != nil {
			return leasestore.Grant{}, s.lose(g, err)
		}
		r.id = clientv3.LeaseID(kv.Lease)
	}
	for attempt := 0; ; attempt++ {
		if g, again, err := s.renewOnce(ctx, g, want, &r, attempt); !again {
			return g, err
		}
	}
}

// extendError is the ambiguous error of an Extend of g.
func extendError(g leasestore.Grant, err error) error {
	return &leasestore.CallError{Store: storeName, Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
}

// renewOnce keeps the etcd lease r.id alive once and reads the key to
// confirm the term, for an Extend of g that wants want seconds. again says
// the key was found on another etcd lease of the term, which r now names:
// keep that one alive instead.
func (s *Store) renewOnce(ctx context.Context, g leasestore.Grant, want int64, r *renewal, attempt int) (_ leasestore.Grant, again bool, _ error) {
	sent := s.opts.clock.Now()
	ka, kaErr := s.cli.KeepAliveOnce(ctx, r.id)
	if kaErr != nil && !errors.Is(kaErr, rpctypes.ErrLeaseNotFound) {
		return leasestore.Grant{}, false, extendError(g, kaErr)
	}
	// A live etcd lease proves the term was not ended by expiry; the
	// read proves the key was not deleted or passed on since. When
	// the etcd lease is gone, the read tells whether the term went
	// with it (etcd deletes a lease's keys as it ends it) or had
	// moved to another etcd lease first.
	kv, readRaftTerm, err := readCommitted(ctx, s.cli, s.Key(g.Name))
	if err != nil {
		return leasestore.Grant{}, false, extendError(g, err)
	}
	if kv == nil || uint64(kv.CreateRevision) != g.Token {
		return leasestore.Grant{}, false, lostLate(s.lose(g, recordEnded(leasestore.OpExtend, g, kv)), r.known, r.ok, r.first)
	}
	if err := recordedTerm(leasestore.OpExtend, g, kv, nil); err != nil {
		// Rewritten, or taken off every etcd lease, by another
		// client: the key no longer records our term.
		return leasestore.Grant{}, false, s.lose(g, err)
	}
	if clientv3.LeaseID(kv.Lease) != r.id {
		return s.followMove(g, kv, r, attempt)
	}
	if kaErr != nil {
		// "No such lease", yet the key is still on it: a stale leader
		// said so (see DESIGN.md, "Confirming that an etcd lease is
		// gone").
		return leasestore.Grant{}, false, extendError(g, errNotFoundKeyOnLease)
	}
	kaRaftTerm := ka.ResponseHeader.GetRaftTerm()
	if err := confirmedInRaftTerm(kaRaftTerm, readRaftTerm); err != nil {
		return leasestore.Grant{}, false, extendError(g, err)
	}
	if !r.ok || !r.known.resumable(kaRaftTerm, sent) || ka.TTL < want || r.known.spare {
		// The renewal is real, but promises nothing: some old
		// leader may still revoke this etcd lease (or it is too
		// short, or a spare's, a second too long). The term moves
		// to a fresh one first.
		g, err := s.relet(ctx, g, r.id, want)
		return g, false, err
	}
	ttl := time.Duration(ka.TTL) * time.Second
	if err := s.remember(g.Name, g.Token, cachedLease{id: r.id, leaseLife: leaseLife{raftTerm: kaRaftTerm, confirmed: sent, ttl: ttl}}); err != nil {
		return leasestore.Grant{}, false, err
	}
	g.Duration = ttl
	return g, false, nil
}

// followMove answers a renewal of r.id that read the term's key (kv) on
// another etcd lease: again, with r naming that etcd lease, when the Store
// knows it as the term's (a concurrent Extend moved the term, and revoked
// the one r knew) or knows none (the key says); ambiguous when its own
// relet is moving the key there, or the key moved twice; else another
// client moved it, and the term is over. See DESIGN.md, "A term is ours
// only while its key records it".
func (s *Store) followMove(g leasestore.Grant, kv *keyValue, r *renewal, attempt int) (_ leasestore.Grant, again bool, _ error) {
	key, got := s.Key(g.Name), clientv3.LeaseID(kv.Lease)
	switch cur, cached := s.cached(g.Name, g.Token); {
	case attempt > 0:
		return leasestore.Grant{}, false, extendError(g, fmt.Errorf("key %q moved between etcd leases %x and %x", key, r.id, got))
	case cached && cur.id == got, !r.ok:
		r.id, r.known, r.ok = got, cur, cached && cur.id == got
		return leasestore.Grant{}, true, nil
	case s.sentTo(g.Token, got):
		// An earlier relet whose answer was lost did move it: renew the
		// key there, as on a lease of unknown life (so moved afresh).
		r.id, r.known, r.ok = got, cachedLease{}, false
		return leasestore.Grant{}, true, nil
	case s.leaseOurs(g.Name, g.Token)(kv.Lease):
		return leasestore.Grant{}, false, extendError(g, fmt.Errorf("key %q is being moved to etcd lease %x by a concurrent Extend", key, got))
	}
	// This Store put the key on r.id; another client moved it.
	return leasestore.Grant{}, false, s.lose(g, movedAway(leasestore.OpExtend, g, kv))
}

// relet moves the term's key from etcd lease old to a fresh one of ttl
// seconds, keeping its create revision (the token).
func (s *Store) relet(ctx context.Context, g leasestore.Grant, old clientv3.LeaseID, ttl int64) (leasestore.Grant, error) {
	fail := func(err error) (leasestore.Grant, error) { return leasestore.Grant{}, extendError(g, err) }
	sent := s.opts.clock.Now()
	gr, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return fail(err)
	}
	key := s.Key(g.Name)
	moved := s.startMove(g.Token, gr.ID)
	defer moved()
	resp, err := moveKey(ctx, s.cli, key, g, old, gr.ID)
	if err != nil {
		// The old lease was just kept alive, so the term lasts its old
		// TTL whichever way this went; the new lease expires unused or
		// carries the key, and then the next Extend follows it there: an
		// outage that cut this answer is no loss.
		s.mu.Lock()
		s.unsure[g.Token] = gr.ID
		s.mu.Unlock()
		return fail(err)
	}
	if !resp.Succeeded {
		s.orphan(ctx, gr.ID)
		kv := elseKV(resp)
		if err := recordedTerm(leasestore.OpExtend, g, kv, nil); err != nil {
			return leasestore.Grant{}, s.lose(g, err)
		}
		if s.leaseOurs(g.Name, g.Token)(kv.Lease) {
			// Still our term, on another lease: a concurrent relet won.
			return fail(fmt.Errorf("key %q moved to etcd lease %x concurrently", key, kv.Lease))
		}
		return leasestore.Grant{}, s.lose(g, movedAway(leasestore.OpExtend, g, kv))
	}
	// Recorded before the old lease is revoked: a concurrent Extend that
	// finds its keep-alive refused follows the key here.
	granted := time.Duration(gr.TTL) * time.Second
	err = s.remember(g.Name, g.Token, cachedLease{id: gr.ID, leaseLife: leaseLife{raftTerm: gr.ResponseHeader.GetRaftTerm(), confirmed: sent, ttl: granted}})
	s.orphan(ctx, old)
	if err != nil {
		return leasestore.Grant{}, err
	}
	g.Duration = granted
	return g, nil
}

// Revoke ends the term g at once: it deletes the key in a transaction
// guarded by g.Token, then revokes the term's etcd lease. It returns an
// error matching leasestore.ErrNotHeld when the term is already over; any other
// error matches leasestore.ErrUnconfirmed (or leasestore.ErrNotSent). Once the key is deleted the
// term is over, so a failure to revoke the emptied etcd lease is not
// reported (it expires by itself).
func (s *Store) Revoke(ctx context.Context, g leasestore.Grant) error {
	done := s.calls.Begin(leasestore.OpRevoke)
	err := s.revoke(ctx, g)
	done(err)
	return err
}

func (s *Store) revoke(ctx context.Context, g leasestore.Grant) error {
	if g.Name == "" || g.Token == 0 {
		return jujuerrors.NotValidf("grant %+v (must have a Name and a Token)", g)
	}
	if err := s.overErr(g.Name, g.Token); err != nil {
		// Over: its key, if any, is someone else's.
		return err
	}
	if err := s.slots.acquireRenewal(ctx, g.Token); err != nil {
		return notSent(leasestore.OpRevoke, g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	deleted, kv, err := deleteTerm(ctx, s.cli, s.Key(g.Name), g.Holder, g.Token)
	if err != nil {
		return &leasestore.CallError{Store: storeName, Op: leasestore.OpRevoke, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if deleted == nil {
		return s.lose(g, recordEnded(leasestore.OpRevoke, g, kv))
	}
	s.forget(g.Token)
	if deleted.Lease != 0 {
		s.orphan(ctx, clientv3.LeaseID(deleted.Lease))
	}
	return nil
}

// Holder reads the named lease's live term: its holder, token and, as
// Duration, the time etcd gives it left (whole seconds, rounded down). It
// returns an error matching leasestore.ErrNotHeld when nobody holds the lease;
// any other error matches leasestore.ErrUnconfirmed (or leasestore.ErrNotSent).
func (s *Store) Holder(ctx context.Context, name string) (leasestore.Grant, error) {
	if name == "" {
		return leasestore.Grant{}, jujuerrors.NotValidf("empty lease name")
	}
	if err := s.slots.acquire(ctx); err != nil {
		return leasestore.Grant{}, notSent(leasestore.OpRead, name, "", 0, err)
	}
	defer s.slots.release()
	return readHolder(ctx, s.cli, s.Key(name), name)
}

// heldBy is the refusal of a claim of name for ttl seconds by the term
// whose key kv was read at revision rev, noted for WatchRelease.
func (s *Store) heldBy(name string, kv *mvccpb.KeyValue, rev, ttl int64) error {
	s.refusedAt.note(name, uint64(kv.CreateRevision), rev, ttl)
	return &leasestore.HeldError{Name: name, Holder: namedHolder(kv.Value), Token: uint64(kv.CreateRevision)}
}

// lose records that the term g is over, as err (a *leasestore.NotHeldError)
// says, and returns err: Extend and Revoke of g answer it from then on.
func (s *Store) lose(g leasestore.Grant, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) >= maxCached {
		clear(s.leases)
		clear(s.unsure)
	}
	s.leases[g.Token] = cachedLease{name: g.Name, over: err}
	return err
}

// overErr is the end of the term (name, token) as the Store answered it,
// if it found the term over; nil otherwise.
func (s *Store) overErr(name string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.leases[token]; ok && c.name == name {
		return c.over
	}
	return nil
}

// leaseOurs says, for termRecord, which etcd leases this Store put the key
// of the term (name, token) on: the one it caches and those a relet is
// moving it to. For a term whose etcd lease it does not know (another
// process's), any: the key says which.
func (s *Store) leaseOurs(name string, token uint64) func(id int64) bool {
	return func(id int64) bool {
		c, ok := s.cached(name, token)
		return !ok || c.id == clientv3.LeaseID(id) || s.isMoving(token, clientv3.LeaseID(id)) || s.sentTo(token, clientv3.LeaseID(id))
	}
}

// startMove records that a relet is moving the key of the term token to
// the etcd lease id, until the func it returns is called.
func (s *Store) startMove(token uint64, id clientv3.LeaseID) (done func()) {
	s.mu.Lock()
	s.moving[token] = append(s.moving[token], id)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ids := slices.DeleteFunc(s.moving[token], func(m clientv3.LeaseID) bool { return m == id }); len(ids) > 0 {
			s.moving[token] = ids
		} else {
			delete(s.moving, token)
		}
	}
}

// isMoving says whether a relet is moving the key of the term token to the
// etcd lease id.
func (s *Store) isMoving(token uint64, id clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.moving[token], id)
}

// sentTo says whether a relet of the term token sent its key to the etcd
// lease id and lost the answer.
func (s *Store) sentTo(token uint64, id clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.unsure[token]
	return ok && got == id
}

// cached returns the etcd lease of the term (name, token), if known. The
// name must match too: a grant carrying another lease's token must not
// keep that lease alive.
func (s *Store) cached(name string, token uint64) (cachedLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.leases[token]
	return c, ok && c.name == name && c.over == nil
}

// remember records l as the etcd lease of the term (name, token), unless
// the Store found the term over meanwhile (a concurrent Extend or Revoke
// did): then it returns that end, and the term stays over.
func (s *Store) remember(name string, token uint64, l cachedLease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.leases[token]; ok && c.name == name && c.over != nil {
		return c.over
	}
	if len(s.leases) >= maxCached {
		clear(s.leases)
		clear(s.unsure)
	}
	if _, ok := s.leases[token]; !ok {
		s.live++
	}
	l.name = name
	s.leases[token] = l
	delete(s.unsure, token)
	return nil
}

func (s *Store) forget(token uint64) {
	s.mu.Lock()
	delete(s.leases, token)
	delete(s.unsure, token)
	s.mu.Unlock()
}

// orphan revokes the etcd lease id, which the Store no longer wants (a
// refused or unconfirmed claim's, a relet's old or unused one, a revoked
// term's): the Store's one revoke of an etcd lease. One it cannot revoke now
// is kept and revoked by the next Claim first, lest an unconfirmed claim's
// key keep the lease from everyone until its TTL.
func (s *Store) orphan(ctx context.Context, id clientv3.LeaseID) {
	if ctx.Err() != nil || revokeLease(ctx, s.cli, id) != nil {
		s.addOrphan(id)
	}
}

// addOrphan keeps id for the next Claim to revoke.
func (s *Store) addOrphan(id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.orphans) == maxOrphans {
		// The oldest has surely expired by now.
		s.orphans = s.orphans[1:]
	}
	s.orphans = append(s.orphans, id)
}

// revokeOrphans revokes the orphans kept; those it cannot revoke stay for
// the next Claim.
func (s *Store) revokeOrphans(ctx context.Context) {
	s.mu.Lock()
	orphans := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	for _, id := range orphans {
		s.orphan(ctx, id)
	}
}
