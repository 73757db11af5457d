package etcdlease

// The etcd vocabulary both stores speak: keys as read, argument checks,
// TTLs, the reads and transactions that read, confirm or end a term, and
// when a keep-alive counts (confirmedInRaftTerm, leaseLife.resumable).

import (
	"context"
	"errors"
	"fmt"
	"time"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// leaseLife is what a store knows of the life of one of its etcd leases:
// the raft term it was granted or last renewed in, as confirmed (see
// confirmedInRaftTerm), the send time of that grant or renewal on the
// store's clock, and its TTL. A keep-alive of the lease may back a promise only
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
	if err := leasestore.CheckName("lease name", name); err != nil {
		return err
	}
	if d <= 0 {
		return jujuerrors.NotValidf("lease duration %v (must be positive)", d)
	}
	return checkHolder(holder)
}

// checkHolder is the rule for a holder: in a claim, and in a key's value
// as read (a value it refuses names no holder: see termRecord).
func checkHolder(holder string) error { return leasestore.CheckName("holder", holder) }

func checkGrant(g leasestore.Grant, d time.Duration) error {
	if err := checkArgs(g.Name, g.Holder, d); err != nil {
		return err
	}
	if g.Token == 0 {
		return jujuerrors.NotValidf("grant with Token 0 (must come from Claim)")
	}
	return nil
}

// resumable says whether a keep-alive of the etcd lease, sent at sent and
// confirmed in raft term kaRaftTerm, may back a promise: only if the lease
// was last confirmed in that same raft term, less than its TTL (less a
// tenth) before; else some deposed raft leader may have a revoke of it in
// flight, and the caller moves the key to a fresh etcd lease (relet) before
// promising anything. See DESIGN.md, "Why a keep-alive confirmed in an
// older raft term cannot back a promise".
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

// confirmedInRaftTerm says whether a keep-alive answered in raft term
// kaRaftTerm is confirmed by a committed read (readCommitted), sent after
// that answer and answered in raft term readRaftTerm: nil when the two are
// the same, for then the raft leader that renewed the etcd lease still led
// a quorum after it did, and etcd keeps the lease until at least the
// keep-alive's send time + TTL. A different raft term is inconclusive
// (errRaftTermChanged). See DESIGN.md, "When a keep-alive counts: confirmed
// in the same raft term".
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

// moveKey moves the key of term g from etcd lease from onto etcd lease to,
// keeping its create revision (the token), in a transaction guarded by
// g's token and holder and by from; if the guard fails it reads the key.
func moveKey(ctx context.Context, cli *clientv3.Client, key string, g leasestore.Grant, from, to clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	return cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(g.Token)),
			clientv3.Compare(clientv3.Value(key), "=", g.Holder),
			clientv3.Compare(clientv3.LeaseValue(key), "=", from)).
		Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(to))).
		Else(clientv3.OpGet(key)).
		Commit()
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
func readHolder(ctx context.Context, cli *clientv3.Client, key, name string) (leasestore.Grant, error) {
	fail := func(err error) (leasestore.Grant, error) {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName, Op: leasestore.OpRead, Name: name, Err: err}
	}
	kv, _, err := get(ctx, cli, key)
	if err != nil {
		return fail(err)
	}
	g, err := heldTerm(name, kv)
	if err != nil {
		return leasestore.Grant{}, err
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return fail(err)
	}
	if ttl.TTL <= 0 {
		// The etcd lease ended after the read, or a stale leader said so:
		// a second read tells (see DESIGN.md, "Confirming that an etcd
		// lease is gone").
		again, _, err := get(ctx, cli, key)
		if err != nil {
			return fail(err)
		}
		if again != nil && again.CreateRevision == kv.CreateRevision && again.Lease == kv.Lease {
			return fail(errNotFoundKeyOnLease)
		}
		return leasestore.Grant{}, &leasestore.NotHeldError{Name: name, Token: g.Token, Reason: "read: the term of " + quote(g.Holder) + " just ended"}
	}
	g.Duration = time.Duration(ttl.TTL) * time.Second
	return g, nil
}

// readCommitted reads key, twice, in a transaction that raft commits and
// that writes nothing: the raft term of the second answer is at least that
// of the leader whose quorum committed the first, on any member, where a
// plain read's may be older. It costs two raft entries per keep-alive to
// confirm, never per key. See DESIGN.md, "Why the confirming read is a
// committed transaction, sent twice".
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
// the raft term of the leader that confirmed the read (see readCommitted).
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
