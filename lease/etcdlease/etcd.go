package etcdlease

// The etcd vocabulary both stores speak: keys and their state as read,
// the checks of a call's arguments, TTLs in whole seconds, the reads and
// transactions that read, confirm or end a term, and the rules by which a
// keep-alive counts (confirmedInRaftTerm) and an etcd lease may be resumed
// (leaseLife.resumable). Neither store's own file is the other's ground:
// what both use lives here.

import (
	"context"
	"errors"
	"fmt"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// leaseLife is what a store knows of the life of one of its etcd leases:
// the raft term it was granted or last renewed in, as confirmed (see
// confirmedInRaftTerm), the send time of that grant or renewal on the store's
// clock, and its TTL. A keep-alive of the lease may back a promise only
// while resumable says so.
type leaseLife struct {
	raftTerm  uint64
	confirmed time.Time
	ttl       time.Duration
}

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
	case d <= 0:
		return jujuerrors.NotValidf("lease duration %v (must be positive)", d)
	}
	return checkHolder(holder)
}

// checkHolder is the rule for a holder: in a claim, and in a key's value
// as read (a value it refuses names no holder: see termRecord).
func checkHolder(holder string) error {
	if holder == "" {
		return jujuerrors.NotValidf("empty holder")
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

// resumable says whether a keep-alive of the etcd lease, sent at sent
// and confirmed in raft term kaRaftTerm, may back a promise: the lease was
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
func (l leaseLife) resumable(kaRaftTerm uint64, sent time.Time) bool {
	return kaRaftTerm == l.raftTerm && sent.Before(l.confirmed.Add(l.ttl-l.ttl/10))
}

// errNotFoundKeyOnLease is the cause when a keep-alive (or a TimeToLive)
// said the etcd lease is gone but the key was read still on it: a stale
// member's answer.
var errNotFoundKeyOnLease = errors.New("not confirmed: a member said the etcd lease is gone but the key is still on it")

// errRaftTermChanged is the cause when a keep-alive and the read that was to
// confirm it were answered in different raft terms.
var errRaftTermChanged = errors.New("keep-alive not confirmed: raft term changed before the confirming read")

// confirmedInRaftTerm says whether a keep-alive whose answer's header says
// raft term kaRaftTerm is confirmed by a committed read, sent after that
// answer, whose header says readRaftTerm: nil when they are the same term.
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
//   - kaRaftTerm ≤ the term of the leader whose lessor renewed the lease: that
//     leader is the answering member itself (whose applied entries are of
//     its term or earlier) or the leader it forwarded to, of its current
//     raft term, which is at least the term of any entry it applied.
//   - readRaftTerm ≥ the term of the leader whose quorum committed the read:
//     it is a transaction raft must commit, sent twice (see
//     readCommitted), and the member answering the second has applied
//     the first and recorded its term — the committing leader's. (A plain
//     linearizable read does not give this: a member that last caught
//     up by installing a snapshot serves reads confirmed by the current
//     leader while its header still names the term of the last entry it
//     applied before the snapshot — etcd's applySnapshot sets neither the
//     term nor the applied index. With five or more voting members, such
//     a member and a stale leader can share that old term, and a
//     keep-alive the stale leader answered passed as confirmed; issue 24,
//     H2, TestSnapshotFollowersStaleRaftTermConfirmsNothing.)
//
// A stale leader cannot commit, so its transactions fail. If kaRaftTerm =
// readRaftTerm = T, the renewing leader's term is ≥ T and the committing
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
func confirmedInRaftTerm(kaRaftTerm, readRaftTerm uint64) error {
	if kaRaftTerm == 0 || kaRaftTerm != readRaftTerm {
		return fmt.Errorf("%w (keep-alive in raft term %d, read in raft term %d)", errRaftTermChanged, kaRaftTerm, readRaftTerm)
	}
	return nil
}

// revokeLease revokes the etcd lease id, and with it every key on it: nil
// once etcd revoked it or said it is gone, else the error. It is how both
// stores revoke an etcd lease (a Store's orphans, a SessionStore's session
// on Close).
func revokeLease(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) error {
	if _, err := cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke etcd lease %x: %w", int64(id), err)
	}
	return nil
}

// deleteTerm deletes key if it records the term token of holder: its
// create revision is token, its value holder, and it is on an etcd lease
// (a key rewritten by another client is not ours to delete). It returns
// the deleted key, or nil and the key as it is (nil when absent).
func deleteTerm(ctx context.Context, cli *clientv3.Client, key, holder string, token uint64) (deleted, kv *keyValue, err error) {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token)),
			clientv3.Compare(clientv3.Value(key), "=", holder),
			clientv3.Compare(clientv3.LeaseValue(key), "!=", 0)).
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

// readHolder reads the live term of the lease name kept at key (see
// heldTerm).
func readHolder(ctx context.Context, cli *clientv3.Client, key, name string) (lease.Grant, error) {
	fail := func(err error) (lease.Grant, error) {
		return lease.Grant{}, &lease.CallError{Store: storeName, Op: "read", Name: name, Err: err}
	}
	kv, _, err := get(ctx, cli, key)
	if err != nil {
		return fail(err)
	}
	g, err := heldTerm(name, kv)
	if err != nil {
		return lease.Grant{}, err
	}
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
		return lease.Grant{}, &lease.NotHeldError{Name: name, Token: g.Token, Reason: "read: the term of " + quote(g.Holder) + " just ended"}
	}
	g.Duration = time.Duration(ttl.TTL) * time.Second
	return g, nil
}

// readCommitted reads key in a transaction that raft commits (its compare
// never holds, and the branch not taken deletes the key, which makes the
// transaction a write: etcd proposes it rather than serving it from a
// ReadIndex), twice in a row; nothing is written, and the revision does
// not move. The raft term in the second answer is at least that of the
// leader whose quorum committed the first (see confirmedInRaftTerm), on any
// member — the answer to a plain read may name an older term. Why twice:
// etcd wakes the caller of a write as it applies the entry, just before
// it records the entry's term as its own (applyEntries: applyEntryNormal
// triggers the waiter, then setAppliedIndex, then setTerm), so the answer
// to one write may still carry the term before it; the second is applied
// after the first's term was recorded, by whichever member answers it.
// It costs two raft entries, once per keep-alive to confirm, never per
// key.
func readCommitted(ctx context.Context, cli *clientv3.Client, key string) (*keyValue, uint64, error) {
	var resp *clientv3.TxnResponse
	for range 2 {
		var err error
		resp, err = cli.Txn(ctx).
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
	raftTerm := resp.Header.GetRaftTerm()
	if len(resp.Kvs) == 0 {
		return nil, raftTerm, nil
	}
	return newKeyValue(resp.Kvs[0]), raftTerm, nil
}
