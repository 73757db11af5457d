package etcdlease

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// AddOrphan records id as the etcd lease of a claim whose outcome was
// unconfirmed, as Claim does when its transaction fails ambiguously.
func AddOrphan(s *Store, id clientv3.LeaseID) { s.addOrphan(id) }

// LostWithProgress is Lost, with f told the revision up to which the watch
// has seen every event of the key.
func LostWithProgress(ctx context.Context, s *Store, g leasestore.Grant, f func(rev int64)) <-chan struct{} {
	return s.lost(ctx, g, f)
}

// RecordUnsure records an unconfirmed claim of name for holder on the
// store's current session, already due for expiry, as a claim whose
// transaction failed ambiguously does. It returns the session's etcd lease
// (to put the key on, as if the claim's put was applied after all) and a
// func that runs the expiry's deletion of it.
func RecordUnsure(s *SessionStore, name, holder string) (clientv3.LeaseID, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.sess.id
	t := s.terms.unsure(name, holder, id, s.opts.clock.Now(), 0)
	return id, func() { s.deleteExpired(expiredTerm{name, t}) }
}

// ClaimSenders returns how many claims wait to be taken into a batch, and
// how many goroutines wait for a call slot to send one, or send one.
func ClaimSenders(s *SessionStore) (waiting, senders int) { return s.claims.counts() }

// SetSessionPromise moves the end of etcd's promise for the store's current
// session to until, as if its latest confirmed keep-alive had been sent at
// until − TTL.
func SetSessionPromise(s *SessionStore, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	s.sess.until = until
}

// HoldSlot takes one of the store's call slots (see WithMaxInFlight) and
// returns the func that frees it.
func HoldSlot(s *SessionStore) func() {
	if err := s.slots.acquire(context.Background()); err != nil {
		panic(err)
	}
	return s.slots.release
}

// SessionConfirmedUntil returns the end of etcd's promise for the store's
// current session, and whether its latest keep-alive was confirmed.
func SessionConfirmedUntil(s *SessionStore) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.sess.promise()
	return p.until, p.err == nil
}

// HoldStoreSlot takes one of a Store's call slots and returns the func
// that frees it.
func HoldStoreSlot(s *Store) func() {
	if err := s.slots.acquire(context.Background()); err != nil {
		panic(err)
	}
	return s.slots.release
}

// StartMove records that a relet of the Store is moving the key of the
// term token to the etcd lease id, as a relet does before it sends its
// transaction, until the func it returns is called.
func StartMove(s *Store, token uint64, id clientv3.LeaseID) func() { return s.startMove(token, id) }

// SlotWaiters returns how many calls wait for one of a Store's call slots.
func SlotWaiters(s *Store) int {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	return len(s.slots.waiting) - s.slots.gone + len(s.slots.renewing) - s.slots.renewingGone
}

// ExtendUncounted is SessionStore.Extend without its StoreReport counters,
// the baseline of BenchmarkSessionExtend.
func ExtendUncounted(s *SessionStore, ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	return s.extendTerm(ctx, g, d)
}

// ErrRaftTermChanged and ErrNotFoundKeyOnLease are the causes of a keep-alive
// left unconfirmed: answered in another raft term than its confirming read,
// or "no such lease" while the read finds the key still on that lease.
var (
	ErrRaftTermChanged    = errRaftTermChanged
	ErrNotFoundKeyOnLease = errNotFoundKeyOnLease
)

// SessionErr returns why the store's current session's latest keep-alive
// was not confirmed; nil once one is (or when there is no session).
func SessionErr(s *SessionStore) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess.promise().err
}

// FollowRelease reads a release watch's channel wch of the term token as
// WatchRelease does: over when an event ended the term, compacted when
// etcd compacted past the watch's start, else the error the watch ended
// with.
func FollowRelease(wch clientv3.WatchChan, token int64) (over, compacted bool, err error) {
	return followRelease(wch, token)
}

// ReleaseWatchFrom returns the revision a WatchRelease of held on s
// starts at.
func ReleaseWatchFrom(s leasestore.Store, held *leasestore.HeldError) int64 {
	switch s := s.(type) {
	case *Store:
		rev, _ := s.refusedAt.from(held)
		return rev
	case *SessionStore:
		rev, _ := s.refusedAt.from(held)
		return rev
	}
	panic("not an etcdlease store")
}

// AwaitSpare waits until the spare etcd lease a release watch of s
// started, if any, is granted (or its grant failed).
func AwaitSpare(s *Store) {
	s.mu.Lock()
	sp := s.spare
	s.mu.Unlock()
	if sp != nil {
		<-sp.ready
	}
}
