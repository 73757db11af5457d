package etcdlease

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// spareLease is an etcd lease a Store granted when a release watch saw a
// term end, for the claim that release wakes: the claim then sends only
// its transaction, where it would send a grant first. A claim takes it as
// the grant it would have made (the same life: its raft term, its send
// time, its TTL), while it is young (spareFor). It is granted a second
// longer than the claim asks, so that it still has the whole TTL asked
// left when the claim takes it; the term's first renewal moves it to a
// fresh etcd lease of the TTL asked (relet). See DESIGN.md, "Hand-over:
// the spare etcd lease".
type spareLease struct {
	asked int64         // the TTL asked, in seconds
	ready chan struct{} // closed once the grant is answered
	old   *spareLease   // the spare it replaced, until it is granted
	// Set before ready is closed: the etcd lease (zero if the grant
	// failed) and its life.
	id clientv3.LeaseID
	leaseLife
}

// spareFor is how long after its grant was sent a spare etcd lease asked
// for ttl may still carry a claim: a tenth of ttl, well within the second
// more it was granted, so that the claim is promised the whole TTL it
// asked and its first renewal comes well before the lease stops being
// resumable (see leaseLife.resumable). A woken claim comes within
// milliseconds (the tracker's wake spread, at most 1 ms).
func spareFor(ttl time.Duration) time.Duration { return ttl / 10 }

// startSpare records that a spare etcd lease of ttl seconds is on its
// way, unless a young one of that TTL is there or on its way (then nil).
// A release watch calls it before it says the term is over, so that the
// claim it wakes finds the spare, if only on its way, and waits for it
// rather than grant an etcd lease of its own; grantSpare then grants it.
func (s *Store) startSpare(ttl int64) *spareLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.spare; old != nil && old.asked == ttl && !s.staleLocked(old) {
		return nil
	}
	sp := &spareLease{asked: ttl, ready: make(chan struct{}), old: s.spare}
	s.spare = sp
	return sp
}

// grantSpare grants the spare sp (from startSpare), bounded by its usable
// age: a later grant would be of no use. The spare it replaces, or sp if
// it was replaced meanwhile, is revoked (orphan) once it is granted.
func (s *Store) grantSpare(sp *spareLease) {
	ctx, cancel := s.within(spareFor(time.Duration(sp.asked) * time.Second))
	defer cancel()
	var gr *clientv3.LeaseGrantResponse
	err := s.slots.acquire(ctx)
	sent := s.opts.clock.Now()
	if err == nil {
		gr, err = s.cli.Grant(ctx, sp.asked+1)
		s.slots.release()
	}
	s.mu.Lock()
	if err == nil {
		sp.id = gr.ID
		sp.leaseLife = leaseLife{raftTerm: gr.ResponseHeader.GetRaftTerm(), confirmed: sent, ttl: time.Duration(gr.TTL) * time.Second}
	}
	close(sp.ready)
	old, replaced := sp.old, s.spare != sp
	sp.old = nil
	s.mu.Unlock()
	s.dropSpare(old)
	if replaced {
		s.dropSpare(sp)
	}
}

// within returns a ctx that ends after d on the Store's clock, and the
// func that ends it sooner.
func (s *Store) within(d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	timer := s.opts.clock.AfterFunc(d, cancel)
	return ctx, func() {
		timer.Stop()
		cancel()
	}
}

// awaitSpare waits, before a claim of ttl seconds takes its call slot,
// until the spare of that TTL on its way, if any, is granted (its grant
// needs a slot too, and is bounded by the spare's usable age) or ctx ends.
func (s *Store) awaitSpare(ctx context.Context, ttl int64) {
	s.mu.Lock()
	sp := s.spare
	s.mu.Unlock()
	if sp == nil || sp.asked != ttl {
		return
	}
	select {
	case <-sp.ready:
	case <-ctx.Done():
	}
}

// takeSpare returns the young spare etcd lease of ttl seconds, granted, if
// there is one, for a claim that started at start; it is then the claim's
// to use or orphan.
func (s *Store) takeSpare(ttl int64, start time.Time) (*spareLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spare
	if sp == nil || sp.asked != ttl {
		return nil, false
	}
	select {
	case <-sp.ready:
	default:
		return nil, false // still on its way: the claim grants its own
	}
	if s.staleAtLocked(sp, start) {
		// Failed, or too old (it carries no key: the next release's
		// spare replaces it, or it expires with its TTL).
		return nil, false
	}
	s.spare = nil
	return sp, true
}

// staleAtLocked says whether the spare sp, granted, is too old to carry a
// claim that starts at start: it must be younger than spareFor and have
// at least the TTL asked left. Called with s.mu held.
func (s *Store) staleAtLocked(sp *spareLease, start time.Time) bool {
	asked := time.Duration(sp.asked) * time.Second
	return sp.id == 0 || !start.Before(sp.confirmed.Add(spareFor(asked))) ||
		sp.confirmed.Add(sp.leaseLife.ttl).Sub(start) < asked
}

// staleLocked says whether the granted spare sp is too old to carry a
// claim. Called with s.mu held.
func (s *Store) staleLocked(sp *spareLease) bool {
	select {
	case <-sp.ready:
		return s.staleAtLocked(sp, s.opts.clock.Now())
	default:
		return false // on its way
	}
}

// dropSpare revokes the spare sp, no longer wanted, if it was granted
// (orphan); one still on its way is dropped by its own grantSpare, which
// finds it replaced.
func (s *Store) dropSpare(sp *spareLease) {
	if sp == nil {
		return
	}
	select {
	case <-sp.ready:
		if sp.id != 0 {
			ctx, cancel := s.within(spareFor(sp.leaseLife.ttl))
			defer cancel()
			s.orphan(ctx, sp.id)
		}
	default:
	}
}
