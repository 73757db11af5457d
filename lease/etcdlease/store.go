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

// cachedLease is the etcd lease of the term of name with some token, and
// what the Store knows of its life: the raft term it was granted or last
// renewed in, as confirmed (see confirmedInTerm), and the send time of
// that grant or renewal, on the Store's clock, for a TTL of ttl. Extend
// resumes the etcd lease only while both still hold (see resumable).
type cachedLease struct {
	name string
	id   clientv3.LeaseID
	leaseLife
}

// leaseLife is what a store knows of the life of one of its etcd leases:
// the raft term it was granted or last renewed in, as confirmed (see
// confirmedInTerm), the send time of that grant or renewal on the store's
// clock, and its TTL. A keep-alive of the lease may back a promise only
// while resumable says so.
type leaseLife struct {
	term      uint64
	confirmed time.Time
	ttl       time.Duration
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

	sent := s.opts.clock.Now()
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
	ttl := time.Duration(gr.TTL) * time.Second
	s.remember(name, token, cachedLease{id: gr.ID, leaseLife: leaseLife{term: gr.ResponseHeader.GetRaftTerm(), confirmed: sent, ttl: ttl}})
	return lease.Grant{Name: name, Holder: holder, Token: token, Duration: ttl}, nil
}

// Extend keeps the term g alive: one keep-alive of its etcd lease, then a
// committed read (readCommitted) confirming the key still carries
// g.Token, answered in the same raft term as the keep-alive (see
// confirmedInTerm). etcd renews a
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

	known, ok := s.cached(g.Name, g.Token)
	id := known.id
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
		sent := s.opts.clock.Now()
		ka, kaErr := s.cli.KeepAliveOnce(ctx, id)
		if kaErr != nil && !errors.Is(kaErr, rpctypes.ErrLeaseNotFound) {
			return fail(kaErr)
		}
		// A live etcd lease proves the term was not ended by expiry; the
		// read proves the key was not deleted or passed on since. When
		// the etcd lease is gone, the read tells whether the term went
		// with it (etcd deletes a lease's keys as it ends it) or had
		// moved to another etcd lease first.
		kv, readTerm, err := readCommitted(ctx, s.cli, key)
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
			if known, ok = s.cached(g.Name, g.Token); ok && known.id != id {
				ok = false
			}
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
		kaTerm := ka.ResponseHeader.GetRaftTerm()
		if err := confirmedInTerm(kaTerm, readTerm); err != nil {
			return fail(err)
		}
		if !ok || !known.resumable(kaTerm, sent) || ka.TTL < want {
			// The renewal is real, but promises nothing: some old
			// leader may still revoke this etcd lease (or it is too
			// short). The term moves to a fresh one first.
			return s.relet(ctx, g, id, want)
		}
		ttl := time.Duration(ka.TTL) * time.Second
		s.remember(g.Name, g.Token, cachedLease{id: id, leaseLife: leaseLife{term: kaTerm, confirmed: sent, ttl: ttl}})
		g.Duration = ttl
		return g, nil
	}
}

// resumable says whether a keep-alive of the etcd lease, sent at sent
// and confirmed in raft term kaTerm, may back a promise: the lease was
// last confirmed in that same raft term, and less than its TTL before
// (less a tenth, for clock rates) — so no raft leader, present or
// deposed, can have found it expired and have a revoke of it in flight.
// Otherwise the caller moves the key to a fresh etcd lease (relet) before
// promising anything; that costs a grant and a transaction, once per
// term after a leader change or an outage longer than the TTL.
//
// Why (issue 24, H1; etcd's server.go revokeExpiredLeases, lessor.go).
// An etcd lease is revoked by expiry only when the lessor of a member
// that believes it leads (a "primary" lessor) finds it expired on its own
// clock: its last renewal there, or its promotion there, plus the TTL.
// The server checks leadership once for the whole batch of expired
// leases, and not at all while the member's raft still ticks; it then
// proposes their revokes, at most 16 in flight, each waiting up to the
// request timeout (5s + 2 × the election timeout). A leader isolated
// just as it found a batch expired proposes the first 16 in its own term,
// where they die with it; the rest wait for a slot, then — the member
// now a follower — for a leader, are forwarded to whichever it hears of
// next, and commit in that leader's term, whatever happened to the lease
// there meanwhile (etcd-io/etcd#15247's unfixed half). The new leader
// promoted the lease on election, so a holder cut off past the TTL that
// comes back has its keep-alive answered and confirmed in the new term —
// and its key deleted seconds later by the old leader's revoke.
//
// What the two conditions exclude. A revoke of l is proposed by a member
// M whose primary lessor had l expired: M led in some raft term T_M.
//
//   - T_M = known.term, the keep-alive's term. M renewed l at or after
//     known.confirmed (or promoted it after), so it finds l expired no
//     sooner than a TTL after that; the keep-alive, sent before, and
//     answered with a TTL by M itself, renewed it first (M answers a
//     renewal of an expired lease only once its revoke is done, with
//     "no such lease"), so M keeps l until sent plus the TTL.
//   - T_M > known.term, the keep-alive's term too (else l is not
//     resumed): M was elected by a quorum after the read that confirmed
//     this keep-alive, so it promoted l after the keep-alive renewed it,
//     and finds it expired no sooner than sent plus the TTL.
//   - T_M < known.term: M was deposed before l was last confirmed; its
//     queued revokes may commit at any later time. l was then last
//     confirmed in a later term than any term M led; and l was granted
//     (or relet) in — and only ever confirmed in — that one term, so a
//     member that led before it never had l at all. The only exception:
//     a raft election between the grant's commit and its answer (the
//     grant's header then names the later term): a leader deposed in that
//     gap has l with an expiry of the grant's time plus the TTL, and its
//     queued revoke could land while a later promise stands.
//
// Since a keep-alive that changes the term is never resumed, every
// promise on l comes from keep-alives confirmed in l's own term, whose
// leaders all keep l until the keep-alive's send time plus the TTL. The
// revoke a deposed leader queued for l finds, when it commits, either no
// key on l (moved: the revoke deletes nothing) or the key still on it
// (then the relet's transaction, guarded by the token and by l, fails,
// and the term is over — with no promise standing, as the last one was
// made before l was last confirmed plus the TTL, the earliest M found l
// expired).
func (l leaseLife) resumable(kaTerm uint64, sent time.Time) bool {
	return kaTerm == l.term && sent.Before(l.confirmed.Add(l.ttl-l.ttl/10))
}

// errNotFoundKeyOnLease is the cause when a keep-alive (or a TimeToLive)
// said the etcd lease is gone but the key was read still on it: a stale
// member's answer.
var errNotFoundKeyOnLease = errors.New("not confirmed: a member said the etcd lease is gone but the key is still on it")

// errTermChanged is the cause when a keep-alive and the read that was to
// confirm it were answered in different raft terms.
var errTermChanged = errors.New("keep-alive not confirmed: raft term changed before the confirming read")

// confirmedInTerm says whether a keep-alive whose answer's header says
// raft term kaTerm is confirmed by a committed read, sent after that
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
//   - readTerm ≥ the term of the leader whose quorum committed the read:
//     it is a transaction raft must commit (see readCommitted), and the
//     member answers only once it has applied that entry, which sets its
//     term to the entry's — the committing leader's. (A plain
//     linearizable read does not give this: a member that last caught
//     up by installing a snapshot serves reads confirmed by the current
//     leader while its header still names the term of the last entry it
//     applied before the snapshot — etcd's applySnapshot sets neither the
//     term nor the applied index. With five or more voting members, such
//     a member and a stale leader can share that old term, and a
//     keep-alive the stale leader answered passed as confirmed; issue 24,
//     H2, TestSnapshotFollowersStaleTermConfirmsNothing.)
//
// A stale leader cannot commit, so its transactions fail. If kaTerm =
// readTerm = T, the renewing leader's term is ≥ T and the committing
// leader's is ≤ T; a leader of a later term than the committing one was
// elected by a quorum that would have refused to append the entry, which
// was proposed after the renewal; so both are term T's leader, which still
// led a quorum after the keep-alive was answered. Its lessor renewed the
// lease (or said it is gone), and a leader elected later promotes its
// lessor as it applies the first entry of its term, extending every lease
// to at least its whole TTL from then (lessor Promote). Either way etcd
// keeps the lease until at least the keep-alive's send time + TTL (on
// etcd's clock; clock rates are assumed to agree). Lease checkpointing
// (off by default) does not change this: a new leader restores the TTL
// remaining at the latest checkpoint, but a renewal first clears that
// checkpoint through raft, synchronously — lessor Renew waits for the
// clear to be applied before it renews and answers — so a leader elected
// after the answer has applied the clear and restores the whole TTL
// (unless the clear timed out, after etcd's request timeout: the server
// ignores that error and renews anyway; the read confirming the renewal
// in the same term makes that unlikely, not impossible). A
// different term is inconclusive (the renewal may have been a stale
// leader's), so the keep-alive is left unconfirmed and retried. (Whether
// the lease may then be resumed at all is leaseLife.resumable's question:
// a deposed leader may still revoke it.)
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
	sent := s.opts.clock.Now()
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
	granted := time.Duration(gr.TTL) * time.Second
	s.remember(g.Name, g.Token, cachedLease{id: gr.ID, leaseLife: leaseLife{term: gr.ResponseHeader.GetRaftTerm(), confirmed: sent, ttl: granted}})
	g.Duration = granted
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
		// Either the lease ended after the read (etcd deletes the key
		// with it), or a stale leader, which never had the lease, said
		// so (TimeToLive is answered from the leader's own lessor, like a
		// keep-alive). A second linearizable read tells them apart.
		again, _, err := get(ctx, cli, key)
		if err != nil {
			return fail(err)
		}
		if again != nil && again.CreateRevision == kv.CreateRevision && again.Lease == kv.Lease {
			return fail(errNotFoundKeyOnLease)
		}
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

// readCommitted reads key in a transaction that raft commits (its compare
// never holds, and the branch not taken deletes the key, which makes the
// transaction a write: etcd proposes it rather than serving it from a
// ReadIndex). Nothing is written, and the revision does not move. The raft
// term in its answer is at least that of the leader whose quorum committed
// it, on any member (see confirmedInTerm): the answer to a plain read may
// name an older term. It costs a raft entry, and is made once per
// keep-alive to confirm, never per key.
func readCommitted(ctx context.Context, cli *clientv3.Client, key string) (*keyValue, uint64, error) {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "<", 0)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, 0, err
	}
	if resp.Succeeded {
		return nil, 0, fmt.Errorf("a compare of create revision < 0 held on %q", key) // etcd would be broken
	}
	return elseKV(resp), resp.Header.GetRaftTerm(), nil
}

// get reads key with a linearizable read; nil when it does not exist. It
// returns the raft term the read was answered in, which may be older than
// the term of the leader that confirmed the read (see readCommitted).
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
func (s *Store) cached(name string, token uint64) (cachedLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.leases[token]
	return c, ok && c.name == name
}

// remember records l as the etcd lease of the term (name, token).
func (s *Store) remember(name string, token uint64, l cachedLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) >= maxCached {
		clear(s.leases)
	}
	l.name = name
	s.leases[token] = l
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
