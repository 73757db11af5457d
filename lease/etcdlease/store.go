package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// Store is a lease.Store on etcd. Each lease is one key, prefix+name, whose
// value is the holder and which is attached to an etcd lease with the
// granted TTL; the term's fencing token is the key's create revision.
//
// etcd alone decides expiry (on its leader's clock): a key whose etcd lease
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
	slots  *slots // they count the calls refused over capacity, for the log
	calls  lease.StoreCounters

	mu sync.Mutex
	// leases caches token -> etcd lease of terms this Store granted or
	// extended. A miss is answered by reading the key, so entries may be
	// dropped at any time; they are pruned when a term is seen to end.
	leases map[uint64]cachedLease
	// orphans are etcd leases of claims whose outcome was unconfirmed: the
	// put may have been applied. The next Claim revokes them first, so a
	// half-applied claim does not keep the lease from everyone (including
	// its own retry) for a whole TTL.
	orphans []clientv3.LeaseID
}

// cachedLease is the etcd lease of the term of name with some token.
type cachedLease struct {
	name string
	id   clientv3.LeaseID
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
		leases: make(map[uint64]cachedLease),
	}, nil
}

var (
	_ lease.Store         = (*Store)(nil)
	_ lease.LossNotifier  = (*Store)(nil)
	_ lease.StoreReporter = (*Store)(nil)
)

// StoreReport implements lease.StoreReporter: the Store's calls of Claim,
// Extend and Revoke so far by the class of their answer (a call not sent,
// ErrOverCapacity among them, is NotSent; one matching lease.ErrUnconfirmed is
// Ambiguous), and the calls in flight, including those waiting for a call
// slot. Holder is not counted.
func (s *Store) StoreReport() lease.StoreReport { return s.calls.StoreReport() }

// Key returns the etcd key that holds the named lease.
func (s *Store) Key(name string) string { return s.prefix + name }

// ttlFor rounds d up to whole seconds, at least one: etcd grants seconds.
func ttlFor(d time.Duration) int64 {
	ttl := int64(d / time.Second)
	if d%time.Second != 0 {
		ttl++ // without d + 1s - 1, which overflows for huge d
	}
	return max(ttl, 1)
}

func checkArgs(name, holder string, d time.Duration) error {
	switch {
	case name == "":
		return jujuerrors.NotValidf("empty lease name")
	case holder == "":
		return jujuerrors.NotValidf("empty holder")
	case d <= 0:
		return jujuerrors.NotValidf("lease duration %v (must be positive)", d)
	}
	return nil
}

func checkGrant(g lease.Grant, d time.Duration) error {
	if err := checkArgs(g.Name, g.Holder, d); err != nil {
		return err
	}
	if g.Token == 0 {
		return jujuerrors.NotValidf("grant with Token 0 (must come from Claim)")
	}
	return nil
}

// Claim takes the named lease for holder for at least d, rounded up to whole
// seconds (etcd may raise it further to its minimum TTL); the returned
// Grant's Duration is the TTL etcd granted. When another term holds the key
// it returns a *lease.HeldError naming that holder. Invalid arguments give
// an error matching errors.NotValid (github.com/juju/errors); any other
// error matches lease.ErrUnconfirmed (and lease.ErrNotSent if the claim was not sent).
func (s *Store) Claim(ctx context.Context, name, holder string, d time.Duration) (lease.Grant, error) {
	done := s.calls.Begin(lease.OpClaim)
	g, err := s.claim(ctx, name, holder, d)
	done(err)
	return g, err
}

func (s *Store) claim(ctx context.Context, name, holder string, d time.Duration) (lease.Grant, error) {
	if err := checkArgs(name, holder, d); err != nil {
		return lease.Grant{}, err
	}
	if err := s.slots.acquire(ctx); err != nil {
		return lease.Grant{}, notSent("claim", name, holder, 0, err)
	}
	defer s.slots.release()
	s.revokeOrphans(ctx)
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &lease.CallError{Store: storeName, Op: "claim", Name: name, Holder: holder, Err: err}
	}

	gr, err := s.cli.Grant(ctx, ttlFor(d))
	if err != nil {
		// A lease granted without our hearing it has no keys and expires
		// by itself.
		return fail(err)
	}
	key := s.Key(name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(gr.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		s.addOrphan(gr.ID)
		return fail(err)
	}
	if !resp.Succeeded {
		// Our etcd lease carries nothing; revoking it is only tidiness,
		// and it expires by itself if this fails.
		s.revokeQuietly(ctx, gr.ID)
		held := &lease.HeldError{Name: name}
		if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			held.Holder = string(rr.Kvs[0].Value)
		}
		return lease.Grant{}, held
	}
	// The transaction made exactly one revision: the key's create revision.
	token := uint64(resp.Header.Revision)
	s.remember(name, token, gr.ID)
	return lease.Grant{Name: name, Holder: holder, Token: token, Duration: time.Duration(gr.TTL) * time.Second}, nil
}

// Extend keeps the term g alive: one keep-alive of its etcd lease, then a
// linearizable read confirming the key still carries g.Token, answered in
// the same raft term as the keep-alive (see confirmedInTerm). etcd renews a
// lease for the TTL it was granted with, so the returned Duration is that
// TTL, which may exceed d; when d is longer than that TTL, Extend moves the
// key to a fresh etcd lease of ceil(d) seconds in a transaction guarded by
// g.Token (the token is unchanged). It returns a *lease.NotHeldError when
// a linearizable read finds the key gone or belonging to a later term (a
// keep-alive's "no such lease" alone ends nothing: a stale member may say
// it); any other error matches lease.ErrUnconfirmed (or lease.ErrNotSent if the
// call was not sent).
func (s *Store) Extend(ctx context.Context, g lease.Grant, d time.Duration) (lease.Grant, error) {
	done := s.calls.Begin(lease.OpExtend)
	g, err := s.extend(ctx, g, d)
	done(err)
	return g, err
}

// extend is Extend, uncounted. (It is long because its one loop —
// keep-alive, read, follow a moved term once — reads best as a whole.)
func (s *Store) extend(ctx context.Context, g lease.Grant, d time.Duration) (lease.Grant, error) {
	if err := checkGrant(g, d); err != nil {
		return lease.Grant{}, err
	}
	if err := s.slots.acquire(ctx); err != nil {
		return lease.Grant{}, notSent("extend", g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &lease.CallError{Store: storeName, Op: "extend", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	key := s.Key(g.Name)

	id, ok := s.cached(g.Name, g.Token)
	if !ok {
		// Not granted by this Store (or forgotten): the key says which
		// etcd lease carries the term, if the term is still alive.
		kv, _, err := get(ctx, s.cli, key)
		if err != nil {
			return fail(err)
		}
		if kv == nil || uint64(kv.CreateRevision) != g.Token {
			return lease.Grant{}, s.notHeld("extend", g, kv)
		}
		id = clientv3.LeaseID(kv.Lease)
	}

	want := ttlFor(d)
	for attempt := 0; ; attempt++ {
		ka, kaErr := s.cli.KeepAliveOnce(ctx, id)
		if kaErr != nil && !errors.Is(kaErr, rpctypes.ErrLeaseNotFound) {
			return fail(kaErr)
		}
		// A live etcd lease proves the term was not ended by expiry; the
		// read proves the key was not deleted or passed on since. When
		// the etcd lease is gone, the read tells whether the term went
		// with it (etcd deletes a lease's keys as it ends it) or had
		// moved to another etcd lease first.
		kv, readTerm, err := get(ctx, s.cli, key)
		if err != nil {
			return fail(err)
		}
		if kv == nil || uint64(kv.CreateRevision) != g.Token {
			return lease.Grant{}, s.notHeld("extend", g, kv)
		}
		if got := clientv3.LeaseID(kv.Lease); got != id {
			// A concurrent Extend moved the term to a longer etcd lease
			// (and revoked the one we knew): keep that one alive instead.
			if attempt > 0 {
				return fail(fmt.Errorf("key %q moved between etcd leases %x and %x", key, id, got))
			}
			id = got
			continue
		}
		if kaErr != nil {
			// A member said the etcd lease is gone, yet a linearizable
			// read finds the key still on it. etcd deletes a lease's keys
			// in the same transaction that removes the lease (and holds
			// back the answer to a renewal of an expired lease until
			// then), so a true "not found" is never followed by this
			// read: the member was a stale leader that never had the
			// lease (granted by the majority after it was cut off).
			return fail(errNotFoundKeyOnLease)
		}
		if err := confirmedInTerm(ka.ResponseHeader.GetRaftTerm(), readTerm); err != nil {
			return fail(err)
		}
		if ka.TTL < want {
			return s.relet(ctx, g, id, want)
		}
		s.remember(g.Name, g.Token, id)
		g.Duration = time.Duration(ka.TTL) * time.Second
		return g, nil
	}
}

// errNotFoundKeyOnLease is the cause when a keep-alive said the etcd lease
// is gone but the key was read still on it: a stale member's answer.
var errNotFoundKeyOnLease = errors.New("keep-alive not confirmed: a member said the lease is gone but the key is still on it")

// errTermChanged is the cause when a keep-alive and the read that was to
// confirm it were answered in different raft terms.
var errTermChanged = errors.New("keep-alive not confirmed: raft term changed before the confirming read")

// confirmedInTerm says whether a keep-alive whose answer's header says
// raft term kaTerm is confirmed by a linearizable read, sent after that
// answer, whose header says readTerm: nil when they are the same term.
//
// Why that confirms it. A keep-alive is not a raft proposal: the member
// that receives it renews the lease in its own lessor if it believes it
// leads, or forwards it to the leader it knows. A leader cut off from its
// peers goes on believing it leads (etcd skips its leadership check while
// raft ticks, etcd-io/etcd#15247) and answers keep-alives of a lease the
// majority may already have expired — or "no such lease" for one the
// majority granted after it was cut off; so the answer alone proves
// nothing. A header's RaftTerm is the *applied* term of the member that
// answered: the term of the latest raft entry it has applied (etcd fills
// the keep-alive's header before it renews). The argument rests on two
// inequalities:
//
//   - kaTerm ≤ the term of the leader whose lessor renewed the lease: that
//     leader is the answering member itself (whose applied entries are of
//     its term or earlier) or the leader it forwarded to, of its current
//     raft term, which is at least the term of any entry it applied.
//   - readTerm ≥ the term of the leader whose quorum confirmed the read
//     (ReadIndex: a quorum acknowledged a heartbeat of that leader after
//     the read arrived): etcd's leader confirms reads only once it has
//     committed an entry of its own term, and the member answers only
//     once it has applied up to the read index, so it has applied an entry
//     of that term.
//
// A stale leader cannot gather that quorum, so its reads fail. If kaTerm =
// readTerm = T, the renewing leader's term is ≥ T and the confirming
// leader's is ≤ T; a leader of a later term than the confirming one was
// elected by a quorum that would have refused the confirming heartbeat,
// which came after the renewal; so both are term T's leader, which still
// led a quorum after the keep-alive was answered. Its lessor renewed the
// lease (or said it is gone), and a leader elected later promotes its
// lessor as it applies the first entry of its term, extending every lease
// to at least its whole TTL from then (lessor Promote). Either way etcd
// keeps the lease until at least the keep-alive's send time + TTL (on
// etcd's clock; clock rates are assumed to agree). One caveat: with lease
// checkpointing enabled (off by default), a new leader restores the TTL
// remaining at the latest checkpoint, and a renewal's clearing of it is
// proposed asynchronously, so a promotion right after a renewal may give
// the lease less than its TTL. A different term is inconclusive (the
// renewal may have been a stale leader's), so the keep-alive is left
// unconfirmed and retried.
func confirmedInTerm(kaTerm, readTerm uint64) error {
	if kaTerm == 0 || kaTerm != readTerm {
		return fmt.Errorf("%w (keep-alive in term %d, read in term %d)", errTermChanged, kaTerm, readTerm)
	}
	return nil
}

// relet moves the term's key from etcd lease old to a fresh one of ttl
// seconds, keeping its create revision (the token).
func (s *Store) relet(ctx context.Context, g lease.Grant, old clientv3.LeaseID, ttl int64) (lease.Grant, error) {
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &lease.CallError{Store: storeName, Op: "extend", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	gr, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return fail(err)
	}
	key := s.Key(g.Name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(g.Token)),
			clientv3.Compare(clientv3.LeaseValue(key), "=", old)).
		Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(gr.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		// The old lease was just kept alive, so the term lasts its old
		// TTL whichever way this went; the new lease expires unused or
		// carries the key.
		return fail(err)
	}
	if !resp.Succeeded {
		s.revokeQuietly(ctx, gr.ID)
		kv := elseKV(resp)
		if kv != nil && uint64(kv.CreateRevision) == g.Token {
			// Still our term, on another lease: a concurrent relet won.
			return fail(fmt.Errorf("key %q moved to etcd lease %x concurrently", key, kv.Lease))
		}
		return lease.Grant{}, s.notHeld("extend", g, kv)
	}
	// The old lease carries no key now; it expires by itself if this fails.
	s.revokeQuietly(ctx, old)
	s.remember(g.Name, g.Token, gr.ID)
	g.Duration = time.Duration(gr.TTL) * time.Second
	return g, nil
}

// Revoke ends the term g at once: it deletes the key in a transaction
// guarded by g.Token, then revokes the term's etcd lease. It returns an
// error matching lease.ErrNotHeld when the term is already over; any other
// error matches lease.ErrUnconfirmed (or lease.ErrNotSent). Once the key is deleted the
// term is over, so a failure to revoke the emptied etcd lease is not
// reported (it expires by itself).
func (s *Store) Revoke(ctx context.Context, g lease.Grant) error {
	done := s.calls.Begin(lease.OpRevoke)
	err := s.revoke(ctx, g)
	done(err)
	return err
}

func (s *Store) revoke(ctx context.Context, g lease.Grant) error {
	if g.Name == "" || g.Token == 0 {
		return jujuerrors.NotValidf("grant %+v (must have a Name and a Token)", g)
	}
	if err := s.slots.acquire(ctx); err != nil {
		return notSent("revoke", g.Name, g.Holder, g.Token, err)
	}
	defer s.slots.release()
	deleted, kv, err := deleteTerm(ctx, s.cli, s.Key(g.Name), g.Token)
	if err != nil {
		return &lease.CallError{Store: storeName, Op: "revoke", Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	if deleted == nil {
		return s.notHeld("revoke", g, kv)
	}
	s.forget(g.Token)
	if deleted.Lease != 0 {
		s.revokeQuietly(ctx, clientv3.LeaseID(deleted.Lease))
	}
	return nil
}

// deleteTerm deletes key if its create revision is token. It returns the
// deleted key, or nil and the key as it is (nil when absent).
func deleteTerm(ctx context.Context, cli *clientv3.Client, key string, token uint64) (deleted, kv *keyValue, err error) {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, nil, err
	}
	if !resp.Succeeded {
		return nil, elseKV(resp), nil
	}
	deleted = &keyValue{CreateRevision: int64(token)}
	if dr := resp.Responses[0].GetResponseDeleteRange(); dr != nil && len(dr.PrevKvs) > 0 {
		deleted = newKeyValue(dr.PrevKvs[0])
	}
	return deleted, nil, nil
}

// elseKV is the key read by the Else branch (a single OpGet) of a
// transaction whose compare failed; nil when the key does not exist.
func elseKV(resp *clientv3.TxnResponse) *keyValue {
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		return newKeyValue(rr.Kvs[0])
	}
	return nil
}

// Holder reads the named lease's live term: its holder, token and, as
// Duration, the time etcd gives it left (whole seconds, rounded down). It
// returns an error matching lease.ErrNotHeld when nobody holds the lease;
// any other error matches lease.ErrUnconfirmed (or lease.ErrNotSent).
func (s *Store) Holder(ctx context.Context, name string) (lease.Grant, error) {
	if name == "" {
		return lease.Grant{}, jujuerrors.NotValidf("empty lease name")
	}
	if err := s.slots.acquire(ctx); err != nil {
		return lease.Grant{}, notSent("read", name, "", 0, err)
	}
	defer s.slots.release()
	return readHolder(ctx, s.cli, s.Key(name), name)
}

// readHolder reads the live term of the lease name kept at key.
func readHolder(ctx context.Context, cli *clientv3.Client, key, name string) (lease.Grant, error) {
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &lease.CallError{Store: storeName, Op: "read", Name: name, Err: err}
	}
	kv, _, err := get(ctx, cli, key)
	if err != nil {
		return fail(err)
	}
	if kv == nil {
		return lease.Grant{}, fmt.Errorf("etcdlease: lease %q: nobody holds it: %w", name, lease.ErrNotHeld)
	}
	g := lease.Grant{Name: name, Holder: string(kv.Value), Token: uint64(kv.CreateRevision)}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return fail(err)
	}
	if ttl.TTL <= 0 {
		// The lease ended after the read; etcd deletes the key with it.
		return lease.Grant{}, &lease.NotHeldError{Name: name, Token: g.Token, Reason: fmt.Sprintf("read: the term of %q just ended", g.Holder)}
	}
	g.Duration = time.Duration(ttl.TTL) * time.Second
	return g, nil
}

// keyValue is the part of a key's state the Store reads.
type keyValue struct {
	CreateRevision int64
	Lease          int64
	Value          []byte
}

func newKeyValue(kv *mvccpb.KeyValue) *keyValue {
	return &keyValue{CreateRevision: kv.CreateRevision, Lease: kv.Lease, Value: kv.Value}
}

// get reads key with a linearizable read; nil when it does not exist. It
// returns the raft term the read was answered in.
func get(ctx context.Context, cli *clientv3.Client, key string) (*keyValue, uint64, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	term := resp.Header.GetRaftTerm()
	if len(resp.Kvs) == 0 {
		return nil, term, nil
	}
	return newKeyValue(resp.Kvs[0]), term, nil
}

// notHeld forgets g and describes why its term is over; kv is the key as
// read (nil when gone).
func (s *Store) notHeld(op string, g lease.Grant, kv *keyValue) error {
	s.forget(g.Token)
	return notHeld(op, g, kv)
}

func (s *Store) revokeQuietly(ctx context.Context, id clientv3.LeaseID) {
	if ctx.Err() != nil {
		return
	}
	_, _ = s.cli.Revoke(ctx, id)
}

// cached returns the etcd lease of the term (name, token), if known. The
// name must match too: a grant carrying another lease's token must not
// keep that lease alive.
func (s *Store) cached(name string, token uint64) (clientv3.LeaseID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.leases[token]
	return c.id, ok && c.name == name
}

func (s *Store) remember(name string, token uint64, id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) >= maxCached {
		clear(s.leases)
	}
	s.leases[token] = cachedLease{name: name, id: id}
}

func (s *Store) forget(token uint64) {
	s.mu.Lock()
	delete(s.leases, token)
	s.mu.Unlock()
}

func (s *Store) addOrphan(id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.orphans) == maxOrphans {
		// The oldest has surely expired by now.
		s.orphans = s.orphans[1:]
	}
	s.orphans = append(s.orphans, id)
}

// revokeOrphans revokes the etcd leases of unconfirmed claims. A lease that
// etcd reports gone, or that is revoked, is dropped from the list; one whose
// revoke is itself unconfirmed stays for the next Claim.
func (s *Store) revokeOrphans(ctx context.Context) {
	s.mu.Lock()
	orphans := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	for i, id := range orphans {
		if ctx.Err() != nil {
			s.readdOrphans(orphans[i:])
			return
		}
		if _, err := s.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.readdOrphans(orphans[i : i+1])
		}
	}
}

func (s *Store) readdOrphans(ids []clientv3.LeaseID) {
	for _, id := range ids {
		s.addOrphan(id)
	}
}
