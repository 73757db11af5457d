package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// maxClaimsPerTxn is how many claims a SessionStore puts in one etcd
// transaction: half of etcd's default limit of operations per transaction
// (--max-txn-ops, 128), which counts nested operations too (a transaction
// of 128 claims is refused).
const maxClaimsPerTxn = 64

// claimBatcher sends a SessionStore's claims in batches, each one etcd
// transaction of nested put-if-absent claims, formed when a call slot is
// free from the newest claims waiting then; it has no bound of its own.
// While claims wait, exactly one sender waits for a slot.
//
// Its invariant: a claim is in exactly one place, the queue (nothing sent),
// a batch (sent once markSent has marked it) or delivered. See DESIGN.md,
// "Claims in batches".
type claimBatcher struct {
	store *SessionStore

	mu      sync.Mutex
	closed  bool
	queue   []*claimReq        // waiting to be taken into a batch, the newest last
	waiting bool               // a sender waits for a slot
	wake    context.CancelFunc // ends that wait: every claim waiting is gone
	senders int                // goroutines waiting for a slot or sending
	wg      sync.WaitGroup     // the senders
}

// claimReq is one Claim waiting for, or in, a batch. Its flags are guarded
// by claimBatcher.mu; its outcome is set before done is closed.
type claimReq struct {
	ctx          context.Context
	name, holder string
	d            time.Duration
	done         chan struct{}

	taken     bool // in a batch (which may wait for the session's grant)
	sent      bool // in a batch whose transaction is being sent
	abandoned bool // its caller's ctx ended first
	delivered bool // done is closed

	sess        *session
	start       time.Time // before the transaction was sent
	token       uint64    // the claim succeeded: the key's create revision
	kv          *keyValue // the claim was denied: the key as it is
	rev         int64     // ... at this revision
	err         error     // the claim was not confirmed
	lostSession bool      // etcd said the session is gone
}

// send queues r and waits until its batch is answered or r.ctx ends. A
// claim whose ctx ends before its batch's transaction is sent is dropped
// from it: it returns an error matching leasestore.ErrNotSent.
func (b *claimBatcher) send(r *claimReq) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: r.name, Holder: r.holder, Err: errClosed}
	}
	if r.ctx.Err() != nil {
		b.mu.Unlock()
		return notSent(leasestore.OpClaim, r.name, r.holder, 0, context.Cause(r.ctx))
	}
	b.queue = append(b.queue, r)
	if !b.waiting {
		b.startSenderLocked()
	}
	b.mu.Unlock()

	select {
	case <-r.done:
		return nil
	case <-r.ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.delivered:
		return nil
	case !r.sent:
		r.abandoned = true
		if b.wake != nil && !slices.ContainsFunc(b.queue, func(r *claimReq) bool { return !r.abandoned }) {
			b.wake()
		}
		if r.taken {
			// Its batch waited for the session's grant.
			return notSent(leasestore.OpClaim, r.name, r.holder, 0, context.Cause(r.ctx))
		}
		// Still queued: a sender waited for a call slot all along.
		err := fmt.Errorf("%w: held back: its batch waited for one of the %d call slots, all busy with calls in flight: %w",
			ErrOverCapacity, b.store.slots.size, context.Cause(r.ctx))
		return notSent(leasestore.OpClaim, r.name, r.holder, 0, err)
	}
	// In flight: the batch will record what happened to the key.
	r.abandoned = true
	return &leasestore.CallError{Store: storeName, Op: leasestore.OpClaim, Name: r.name, Holder: r.holder, Err: context.Cause(r.ctx)}
}

// startSenderLocked starts the sender that waits for a slot. Called with
// b.mu held.
func (b *claimBatcher) startSenderLocked() {
	b.waiting = true
	b.senders++
	b.wg.Add(1)
	go b.sendOne()
}

// sendOne waits for a call slot, takes the next batch and sends it. It
// ends without sending when every claim waiting is gone.
func (b *claimBatcher) sendOne() {
	defer b.wg.Done()
	for {
		ctx, cancel := context.WithCancel(b.store.ctx)
		b.mu.Lock()
		if b.store.ctx.Err() != nil {
			// Closed: the claims still waiting fail without being sent.
			for _, r := range b.queue {
				if !r.abandoned {
					r.err, r.delivered = errClosed, true
					close(r.done)
				}
			}
			b.queue = nil
		}
		if !slices.ContainsFunc(b.queue, func(r *claimReq) bool { return !r.abandoned }) {
			b.waiting = false
			b.senders--
			b.mu.Unlock()
			cancel()
			return
		}
		b.wake = cancel
		b.mu.Unlock()
		err := b.store.slots.acquire(ctx)
		cancel()
		b.mu.Lock()
		b.wake = nil
		if err != nil {
			// Woken (every claim waiting was gone) or closing: look again.
			b.mu.Unlock()
			continue
		}
		batch := b.takeLocked()
		if len(b.queue) > 0 {
			b.startSenderLocked() // the next one waits
		} else {
			b.waiting = false
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			b.sendBatch(batch) // releases the slot
		} else {
			b.store.slots.release()
		}
		b.mu.Lock()
		b.senders--
		b.mu.Unlock()
		return
	}
}

// takeLocked takes the next batch: the newest claims, at most one per name
// (etcd refuses a transaction that puts one key twice), dropping those
// whose callers are gone. Called with b.mu held.
func (b *claimBatcher) takeLocked() []*claimReq {
	var batch, kept []*claimReq
	names := make(map[string]bool)
	for i := len(b.queue) - 1; i >= 0; i-- {
		r := b.queue[i]
		switch {
		case r.abandoned:
		case len(batch) < maxClaimsPerTxn && !names[r.name]:
			names[r.name] = true
			r.taken = true
			batch = append(batch, r)
		default:
			kept = append(kept, r)
		}
	}
	// kept was filled newest first: restore oldest first.
	slices.Reverse(kept)
	b.queue = kept
	return batch
}

// batchContext ends when the store closes or every claim of the batch has
// had its ctx end (a lease.Tracker ends its calls with a timer, not a
// deadline).
func (b *claimBatcher) batchContext(batch []*claimReq) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(b.store.ctx)
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

// sendBatch sends one transaction of nested put-if-absent claims, on the
// call slot its sender holds, and delivers each outcome. The claims whose
// callers are gone by the time it is sent are left out.
func (b *claimBatcher) sendBatch(batch []*claimReq) {
	s := b.store
	ctx, cancel := b.batchContext(batch)
	defer cancel()
	sent := false
	var resp *clientv3.TxnResponse
	sess, err := s.session(ctx)
	start := s.opts.clock.Now()
	if err == nil {
		if batch = b.markSent(batch); len(batch) > 0 {
			sent = true
			resp, err = s.cli.Txn(ctx).Then(claimOps(s.prefix, batch, sess)...).Commit()
		}
	}
	s.slots.release()
	lost := sent && errors.Is(err, rpctypes.ErrLeaseNotFound)
	if lost && sess.markLost() {
		s.sessionLost(sess)
	}

	// The term table first, then the claims: an unsure claim is recorded
	// before its caller can retry.
	s.mu.Lock()
	defer s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range batch {
		r.sess, r.start = sess, start
		switch {
		case lost:
			r.err, r.lostSession = err, true
		case err != nil && !sent && errors.Is(err, leasestore.ErrNotSent):
			r.err = err // closed
		case err != nil && !sent:
			r.err = fmt.Errorf("%w: %w", leasestore.ErrNotSent, err)
		case err != nil:
			// The puts may have been applied.
			r.err = err
			s.terms.unsure(r.name, r.holder, sess.id, start, r.d)
		default:
			sub := (*clientv3.TxnResponse)(resp.Responses[i].GetResponseTxn())
			if !sub.Succeeded {
				r.kv, r.rev = elseKV(sub), resp.Header.Revision
				break
			}
			// Every put of the transaction has its revision.
			r.token = uint64(resp.Header.Revision)
			if r.abandoned {
				s.terms.unsure(r.name, r.holder, sess.id, start, r.d)
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
func (b *claimBatcher) markSent(batch []*claimReq) []*claimReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.DeleteFunc(batch, func(r *claimReq) bool {
		r.sent = !r.abandoned
		return r.abandoned
	})
}

// close stops taking claims and waits for the senders, which end with the
// store's ctx.
func (b *claimBatcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

// counts returns how many claims wait to be taken into a batch, and how
// many senders wait for a slot or send.
func (b *claimBatcher) counts() (waiting, senders int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.queue {
		if !r.abandoned {
			waiting++
		}
	}
	return waiting, b.senders
}

// claimOps returns the batch's claims as nested put-if-absent transactions
// of their keys (prefix+name) on sess.
func claimOps(prefix string, batch []*claimReq, sess *session) []clientv3.Op {
	ops := make([]clientv3.Op, len(batch))
	for i, r := range batch {
		key := prefix + r.name
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(key, r.holder, clientv3.WithLease(sess.id))},
			[]clientv3.Op{clientv3.OpGet(key)})
	}
	return ops
}
