package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// maxClaimsPerTxn is how many claims a SessionStore puts in one etcd
// transaction: half of etcd's default limit of operations per transaction
// (--max-txn-ops, 128), which counts nested operations too (a transaction
// of 128 claims is refused).
const maxClaimsPerTxn = 64

// maxClaimSenders is how many claim transactions a SessionStore has in
// flight at most: a new one starts while a full batch waits.
const maxClaimSenders = 4

// claimReq is one Claim waiting for, or in, a batch. Its flags are guarded
// by SessionStore.mu; its outcome is set before done is closed.
type claimReq struct {
	ctx          context.Context
	name, holder string
	d            time.Duration
	done         chan struct{}

	sent      bool // in a batch whose transaction is being sent
	abandoned bool // its caller's ctx ended first
	delivered bool // done is closed

	sess        *session
	start       time.Time // before the transaction was sent
	token       uint64    // the claim succeeded: the key's create revision
	kv          *keyValue // the claim was denied: the key as it is
	err         error     // the claim was not confirmed
	lostSession bool      // etcd said the session is gone
}

// sendClaim queues r and waits until its batch is answered or r.ctx ends.
// Claims are sent in batches, a few transactions at a time, each claim a
// nested put-if-absent: ten thousand claims take a hundred transactions
// rather than ten thousand. The newest claims go first, as with the call
// slots. A claim whose ctx ends before its batch's transaction is sent is
// dropped from it: it returns an error matching lease.ErrNotSent.
func (s *SessionStore) sendClaim(r *claimReq) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return &OpError{Op: "claim", Name: r.name, Holder: r.holder, Err: errClosed}
	}
	if err := r.ctx.Err(); err != nil {
		s.mu.Unlock()
		return notSent("claim", r.name, r.holder, 0, err)
	}
	s.claims = append(s.claims, r)
	if s.senders == 0 || (s.senders < maxClaimSenders && len(s.claims) >= maxClaimsPerTxn) {
		s.senders++
		s.wg.Add(1)
		go s.sendClaims()
	}
	s.mu.Unlock()

	select {
	case <-r.done:
		return nil
	case <-r.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.delivered:
		return nil
	case !r.sent:
		r.abandoned = true
		return notSent("claim", r.name, r.holder, 0, r.ctx.Err())
	}
	// In flight: the batch will record what happened to the key.
	r.abandoned = true
	return &OpError{Op: "claim", Name: r.name, Holder: r.holder, Err: r.ctx.Err()}
}

// sendClaims sends batches of the queued claims until none is left.
func (s *SessionStore) sendClaims() {
	defer s.wg.Done()
	for {
		batch := s.takeClaims()
		if batch == nil {
			return
		}
		s.sendBatch(batch)
	}
}

// takeClaims takes the next batch: the newest claims, at most one per name
// (etcd refuses a transaction that puts one key twice). It returns nil,
// and ends the sender, when no claim waits.
func (s *SessionStore) takeClaims() []*claimReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch, kept []*claimReq
	names := make(map[string]bool)
	for i := len(s.claims) - 1; i >= 0; i-- {
		r := s.claims[i]
		switch {
		case r.abandoned:
		case len(batch) < maxClaimsPerTxn && !names[r.name]:
			names[r.name] = true
			batch = append(batch, r)
		default:
			kept = append(kept, r)
		}
	}
	// kept was filled newest first: restore oldest first.
	slices.Reverse(kept)
	s.claims = kept
	if len(batch) == 0 {
		s.senders--
		return nil
	}
	return batch
}

// batchContext ends when the store closes or every claim of the batch has
// had its ctx end (a lease.Tracker ends its calls with a timer, not a
// deadline).
func (s *SessionStore) batchContext(batch []*claimReq) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, r := range batch {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// sendBatch sends one transaction of nested put-if-absent claims and
// delivers each outcome. The claims whose callers are gone by the time it
// is sent are left out.
func (s *SessionStore) sendBatch(batch []*claimReq) {
	ctx, cancel := s.batchContext(batch)
	defer cancel()
	sent := false
	var resp *clientv3.TxnResponse
	sess, err := s.session(ctx)
	start := s.opts.clock.Now()
	if err == nil {
		if err = s.slots.acquire(ctx); err == nil {
			if batch = s.markSent(batch); len(batch) > 0 {
				sent = true
				resp, err = s.cli.Txn(ctx).Then(s.claimOps(batch, sess)...).Commit()
			}
			s.slots.release()
		}
	}
	lost := sent && errors.Is(err, rpctypes.ErrLeaseNotFound)
	if lost {
		s.sessionLost(sess)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range batch {
		r.sess, r.start = sess, start
		switch {
		case lost:
			r.err, r.lostSession = err, true
		case err != nil && !sent:
			r.err = fmt.Errorf("%w: %w", lease.ErrNotSent, err)
		case err != nil:
			// The puts may have been applied.
			r.err = err
			s.unsureLocked(r, sess, start)
		default:
			sub := (*clientv3.TxnResponse)(resp.Responses[i].GetResponseTxn())
			if !sub.Succeeded {
				r.kv = elseKV(sub)
				break
			}
			// Every put of the transaction has its revision.
			r.token = uint64(resp.Header.Revision)
			if r.abandoned {
				s.unsureLocked(r, sess, start)
			}
		}
		if !r.abandoned {
			r.delivered = true
			close(r.done)
		}
	}
}

// markSent marks the claims of batch whose callers still wait as sent, and
// returns them.
func (s *SessionStore) markSent(batch []*claimReq) []*claimReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(batch, func(r *claimReq) bool {
		r.sent = !r.abandoned
		return r.abandoned
	})
}

// claimOps returns the batch's claims as nested put-if-absent transactions
// of their keys on sess.
func (s *SessionStore) claimOps(batch []*claimReq, sess *session) []clientv3.Op {
	ops := make([]clientv3.Op, len(batch))
	for i, r := range batch {
		key := s.Key(r.name)
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(key, r.holder, clientv3.WithLease(sess.id))},
			[]clientv3.Op{clientv3.OpGet(key)})
	}
	return ops
}

// unsureLocked records that r's put may have been applied with nobody told:
// a retry of the claim adopts the key, and if none comes, the key is
// deleted once r's duration has passed. A live term of the name is left
// alone, and so is an expired one: its key may be being deleted, and must
// not be adopted (a key r put meanwhile is an orphan to the watch).
func (s *SessionStore) unsureLocked(r *claimReq, sess *session, start time.Time) {
	if t := s.terms[r.name]; t == nil || t.state == termOver || t.state == termUnsure {
		s.setTermLocked(r.name, &term{holder: r.holder, sess: sess, expires: start.Add(r.d), state: termUnsure})
	}
}
