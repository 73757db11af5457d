package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// admission decides whether a Store takes a new term: it refuses claims
// (ErrOverCapacity, not sent) while its keep-alives run late for want of
// call slots, or while the terms it holds would keep every slot busy with
// renewals (Little's law), so that the slots go to the terms it holds
// before their etcd leases run out. A SessionStore has none: its renewals
// cost nothing per term. See DESIGN.md, "Store admission: no new term it
// cannot renew".
type admission struct {
	mu     sync.Mutex
	until  time.Time     // claims are refused until then
	waited time.Duration // the latest late keep-alive's wait for a slot
	ttl    time.Duration // ... and its etcd lease's TTL
	slots  int           // the store's call slots

	// Moving averages (weight 1/16 for the latest): how long a renewal
	// and a claim hold a slot, and the time between renewals of a term.
	renewHold, claimHold, period time.Duration

	// refused is the latest refusal, made at refusedAt and reused for
	// liveCountEvery: thousands of trackers may ask to claim every few
	// milliseconds while the store is full, and formatting each refusal
	// afresh would cost the renewals CPU.
	refused   error
	refusedAt time.Time
	// claiming counts the claims admitted and not yet answered: terms
	// soon, whose renewals count already.
	claiming int
}

// average moves the moving average *avg towards d.
func average(avg *time.Duration, d time.Duration) {
	if *avg == 0 {
		*avg = d
		return
	}
	*avg += (d - *avg) / 16
}

// renewed records that a renewal held a slot for hold, period after the
// lease's previous renewal (0: not known).
func (a *admission) renewed(hold, period time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	average(&a.renewHold, hold)
	if period > 0 {
		average(&a.period, period)
	}
}

// claimed records that a claim held a slot for hold.
func (a *admission) claimed(hold time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	average(&a.claimHold, hold)
}

// lateAfter is how long a keep-alive of an etcd lease of ttl may wait for
// a call slot before it is late: a twentieth of the TTL, a tenth of what
// a tracker leaves between its renewal (at about half the TTL) and the
// lease's end.
func lateAfter(ttl time.Duration) time.Duration { return ttl / 20 }

// note records that a keep-alive of an etcd lease of ttl waited for a call
// slot from start to now, and gave up if gaveUp; it says whether that was
// late.
func (a *admission) note(start, now time.Time, ttl time.Duration, gaveUp bool) bool {
	waited := now.Sub(start)
	if !gaveUp && waited < lateAfter(ttl) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if until := now.Add(ttl / 2); until.After(a.until) {
		a.until = until
	}
	a.waited, a.ttl = waited, ttl
	return true
}

// refusal is the cause of the refusal at now of a claim for an etcd lease
// of ttl, by a store holding live terms, or nil when the claim may go;
// then, if admit, the claim is counted as admitted until claimDone. The
// cause matches leasestore.ErrNotSent and ErrOverCapacity.
func (a *admission) refusal(now time.Time, ttl time.Duration, live int, admit bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refused == nil || now.Sub(a.refusedAt) >= liveCountEvery {
		a.refused, a.refusedAt = a.refuse(now, ttl, live+a.claiming), now
	}
	if a.refused == nil && admit {
		a.claiming++
	}
	return a.refused
}

// claimDone ends the count of an admitted claim.
func (a *admission) claimDone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.claiming--
}

// refuse is refusal's answer, made afresh for terms live and claimed.
// Called with a.mu held.
func (a *admission) refuse(now time.Time, ttl time.Duration, live int) error {
	if now.Before(a.until) {
		return fmt.Errorf("%w: %w: keep-alives run late (one waited %v of its etcd lease's TTL %v for one of the %d call slots): no new terms until they are on time",
			leasestore.ErrNotSent, ErrOverCapacity, a.waited.Round(time.Millisecond), a.ttl, a.slots)
	}
	hold, period := a.renewHold, a.period
	if hold == 0 {
		// No renewal measured yet: count one as three claims (see
		// DESIGN.md, "Store admission: no new term it cannot renew").
		hold = a.claimHold * 3
	}
	if period == 0 {
		period = ttl / 2
	}
	// A term's renewals come one at a time: each keeps at most one
	// slot busy.
	if busy := float64(live+1) * min(float64(hold)/float64(period), 1); busy > float64(a.slots) {
		return fmt.Errorf("%w: %w: the %d terms held would keep %.0f of the %d call slots busy with renewals (each holds one %v, every %v): no new terms beyond them",
			leasestore.ErrNotSent, ErrOverCapacity, live, busy, a.slots, hold.Round(time.Millisecond), period.Round(time.Millisecond))
	}
	return nil
}

// admit admits a claim of name for holder, for an etcd lease of ttl, and
// takes a call slot for it; release frees the slot and ends the claim's
// count. It asks before it waits for a slot and again once it has one. A
// refusal is returned after an eighth of the TTL, or when ctx ends.
func (s *Store) admit(ctx context.Context, name, holder string, ttl time.Duration) (release func(), err error) {
	refused := func(err error) (func(), error) {
		s.holdBack(ctx, ttl/8)
		return nil, claimError(name, holder, err)
	}
	now := s.opts.clock.Now()
	if err := s.admission.refusal(now, ttl, s.liveTerms(now), false); err != nil {
		return refused(err)
	}
	if err := s.slots.acquire(ctx); err != nil {
		return nil, notSent(leasestore.OpClaim, name, holder, 0, err)
	}
	now = s.opts.clock.Now()
	if err := s.admission.refusal(now, ttl, s.liveTerms(now), true); err != nil {
		s.slots.release()
		return refused(err)
	}
	return func() {
		s.slots.release()
		s.admission.claimDone()
	}, nil
}

// renewalSlot takes a call slot for an Extend of g, as a renewal, and
// records in r.first when it had it. A wait that was late (see
// admission.note) is noted in r and in the term's cache entry, for
// lostLate.
func (s *Store) renewalSlot(ctx context.Context, g leasestore.Grant, want int64, r *renewal) error {
	ttl := time.Duration(want) * time.Second
	if r.ok {
		ttl = r.known.ttl
	}
	entered := s.opts.clock.Now()
	err := s.slots.acquireRenewal(ctx, g.Token)
	if now := s.opts.clock.Now(); s.admission.note(entered, now, ttl, gaveUpOnSlot(err)) && r.ok {
		r.known.lateWait = max(r.known.lateWait, now.Sub(entered))
		s.markLate(g.Name, g.Token, r.known.lateWait)
	}
	if err != nil {
		return notSent(leasestore.OpExtend, g.Name, g.Holder, g.Token, err)
	}
	r.first = s.opts.clock.Now()
	return nil
}

// gaveUpOnSlot says whether err, a slot wait's, means the wait ran out of
// time: the store is late. A wait cancelled (Close, a step-down) says
// nothing of its load.
func gaveUpOnSlot(err error) bool {
	return errors.Is(err, ErrOverCapacity) && errors.Is(err, context.DeadlineExceeded)
}

// answered says whether err is etcd's answer (none, or a definitive one):
// only a call etcd answered measures what a call costs, not one its ctx cut.
func answered(err error) bool {
	return err == nil || errors.Is(err, leasestore.ErrHeld) || errors.Is(err, leasestore.ErrNotHeld)
}

// holdBack waits for d or until ctx ends.
func (s *Store) holdBack(ctx context.Context, d time.Duration) {
	t := s.opts.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.Chan():
	}
}

// liveCountEvery is how often liveTerms counts the cache afresh.
const liveCountEvery = 100 * time.Millisecond

// liveTerms is how many terms this Store keeps alive at now: those whose
// etcd lease's last confirmed renewal reaches past now, counted at most
// every liveCountEvery (plus the terms cached since), for the claims'
// admission.
func (s *Store) liveTerms(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.countedAt) < liveCountEvery {
		return s.live
	}
	s.live, s.countedAt = 0, now
	for _, c := range s.leases {
		if now.Before(c.confirmed.Add(c.ttl)) {
			s.live++
		}
	}
	return s.live
}

// markLate records that a keep-alive of the term (name, token) waited
// wait for a call slot, late.
func (s *Store) markLate(name string, token uint64, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.leases[token]; ok && c.name == name && c.over == nil {
		c.lateWait = max(c.lateWait, wait)
		s.leases[token] = c
	}
}

// lostLate is the loss err (the term's key gone, or another term's) of a
// term whose etcd lease known (if ok) ran out before its keep-alive was
// sent at sent, while the store's keep-alives of it waited late for call
// slots: the store's overload ended it, and the error says so — it
// matches ErrOverCapacity as well as leasestore.ErrNotHeld. Any other loss is
// err as it is.
func lostLate(err error, known cachedLease, ok bool, sent time.Time) error {
	if !ok || known.lateWait == 0 || sent.Before(known.confirmed.Add(known.ttl)) {
		return err
	}
	return fmt.Errorf("%w (%w: its etcd lease ran out %v after its last confirmed renewal, before this store sent the keep-alive: keep-alives waited up to %v for call slots)",
		err, ErrOverCapacity, sent.Sub(known.confirmed).Round(time.Millisecond), known.lateWait.Round(time.Millisecond))
}
