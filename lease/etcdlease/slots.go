package etcdlease

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coldstart-go/coldstart/lease"
)

// slots bounds the calls in flight. Renewals of terms already promised
// (and revokes, which end terms) are served before any other call: a
// store that falls behind must keep the terms it holds rather than take
// new ones, and a claim that waits costs nobody a promise, while a late
// keep-alive costs a term.
//
// Renewals are served oldest term first (lowest token): when the terms
// held need more renewals than etcd answers in time, the same terms are
// renewed every round and only the newest go, rather than every term
// missing a renewal in turn until all of them have run out. Other calls
// are served newest first: when thousands of calls start together, each
// with a deadline, the oldest waiters are the ones about to give up, and
// a slot handed to one of them is often wasted on a call that times out;
// the newest still has its whole timeout ahead. First-in first-out
// service under such a storm serves mostly calls that then time out.
type slots struct {
	mu   sync.Mutex
	size int
	free int
	// waiting is the stack of other calls, the newest last; gone counts
	// those of them that gave up.
	waiting []*slotWaiter
	gone    int
	// renewing is the heap of renewals, the oldest term first;
	// renewingGone counts those of them that gave up.
	renewing     renewalHeap
	renewingGone int
}

type slotWaiter struct {
	ready chan struct{} // closed when handed a slot
	gone  bool
	token uint64 // a renewal's term
}

// renewalHeap is a container/heap of renewals waiting, lowest token first.
type renewalHeap []*slotWaiter

func (h renewalHeap) Len() int           { return len(h) }
func (h renewalHeap) Less(i, j int) bool { return h[i].token < h[j].token }
func (h renewalHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *renewalHeap) Push(x any)        { *h = append(*h, x.(*slotWaiter)) }
func (h *renewalHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

func newSlots(n int) *slots { return &slots{size: n, free: n} }

// acquire takes a slot for a call that renews nothing (a claim, a read),
// as wait does. A call refused (ErrOverCapacity) is counted NotSent in
// the store's StoreReport.
func (s *slots) acquire(ctx context.Context) error { return s.wait(ctx) }

// wait takes a slot for a call that renews nothing, waiting while none is
// free. It returns ctx's cause (context.Cause), without a slot, if ctx had
// ended already; if ctx ends while it waits, an error matching both
// ErrOverCapacity and ctx's cause, which says what held the call back
// (see heldBackLocked).
func (s *slots) wait(ctx context.Context) error { return s.take(ctx, false, 0) }

// acquireRenewal takes a slot for a renewal or a revoke of the term
// token, as wait does, ahead of every call that renews nothing and of
// every renewal of a later term.
func (s *slots) acquireRenewal(ctx context.Context, token uint64) error {
	return s.take(ctx, true, token)
}

func (s *slots) take(ctx context.Context, renewal bool, token uint64) error {
	s.mu.Lock()
	if ctx.Err() != nil {
		s.mu.Unlock()
		return context.Cause(ctx)
	}
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{ready: make(chan struct{}), token: token}
	if renewal {
		heap.Push(&s.renewing, w)
	} else {
		s.waiting = append(s.waiting, w)
	}
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready:
		// Handed a slot as ctx ended: pass it on. It was held back all
		// the same.
		s.releaseLocked()
	default:
		w.gone = true
		if renewal {
			s.renewingGone++
		} else {
			s.gone++
		}
		s.compact()
	}
	return s.heldBackLocked(ctx)
}

// heldBackLocked is the error of a call held back for a slot until ctx
// ended: it matches ErrOverCapacity and ctx's cause (a lease.Tracker ends
// its calls with a cause, its call timeout, which says more than ctx's
// "context canceled"), and says what the call waited behind. Called with
// s.mu held.
func (s *slots) heldBackLocked(ctx context.Context) error {
	waiting := len(s.waiting) - s.gone + len(s.renewing) - s.renewingGone
	return fmt.Errorf("%w: held back behind %d calls in flight, one per call slot (%d other calls waiting): %w",
		ErrOverCapacity, s.size-s.free, waiting, context.Cause(ctx))
}

// gaveUpOnSlot says whether err, a slot wait's, means the wait ran out of
// time: the store is late. A wait cancelled (Close, a step-down) says
// nothing of its load.
func gaveUpOnSlot(err error) bool {
	return errors.Is(err, ErrOverCapacity) && errors.Is(err, context.DeadlineExceeded)
}

// release returns a slot: to the renewal of the oldest term waiting, else
// to the newest other call, if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// releaseLocked is release, called with s.mu held.
func (s *slots) releaseLocked() {
	for s.renewing.Len() > 0 {
		w := heap.Pop(&s.renewing).(*slotWaiter)
		if w.gone {
			s.renewingGone--
			continue
		}
		close(w.ready)
		return
	}
	for n := len(s.waiting); n > 0; n-- {
		w := s.waiting[n-1]
		s.waiting[n-1] = nil
		s.waiting = s.waiting[:n-1]
		if w.gone {
			s.gone--
			continue
		}
		close(w.ready)
		return
	}
	s.free++
}

// compact drops the waiters that gave up once they are most of their
// stack or heap, so that one whose bottom is never reached does not grow
// without bound. Called with s.mu held.
func (s *slots) compact() {
	keep := func(ws []*slotWaiter) []*slotWaiter {
		kept := ws[:0]
		for _, w := range ws {
			if !w.gone {
				kept = append(kept, w)
			}
		}
		clear(ws[len(kept):])
		return kept
	}
	if s.gone >= 64 && 2*s.gone >= len(s.waiting) {
		s.waiting, s.gone = keep(s.waiting), 0
	}
	if s.renewingGone >= 64 && 2*s.renewingGone >= len(s.renewing) {
		s.renewing, s.renewingGone = keep(s.renewing), 0
		heap.Init(&s.renewing)
	}
}

// lateness is how late a Store's keep-alives run, or would run, for want
// of call slots: the store's own overload, which etcd cannot see. The
// Store refuses new terms (ErrOverCapacity, not sent) rather than
// let its keep-alives run late, so that the slots go to the terms it
// holds, before their etcd leases run out:
//
//   - when a keep-alive waited for a slot for lateAfter of its etcd
//     lease's TTL, or gave up waiting: from then on for half that TTL;
//   - when the terms it holds would keep all its slots busy with
//     renewals (Little's law: terms × the time a renewal etcd answered
//     held a slot ÷ the time between renewals of a term; at most one
//     slot per term, as its renewals come one at a time). That is what
//     keeps a claim storm from taking more terms than etcd can renew:
//     the keep-alives of terms claimed in the storm are due only later,
//     so until renewals have been measured one counts as three claims.
//     While etcd is the bottleneck a call's slot time is the slots ÷
//     etcd's throughput, so the bound is renewals arriving as fast as
//     etcd answers them; below it, slot time is etcd's latency and the
//     slots bound the terms (WithMaxInFlight).
type lateness struct {
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
func (l *lateness) renewed(hold, period time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	average(&l.renewHold, hold)
	if period > 0 {
		average(&l.period, period)
	}
}

// claimed records that a claim held a slot for hold.
func (l *lateness) claimed(hold time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	average(&l.claimHold, hold)
}

// lateAfter is how long a keep-alive of an etcd lease of ttl may wait for
// a call slot before it is late: a twentieth of the TTL, a tenth of what
// a tracker leaves between its renewal (at about half the TTL) and the
// lease's end.
func lateAfter(ttl time.Duration) time.Duration { return ttl / 20 }

// note records that a keep-alive of an etcd lease of ttl waited for a call
// slot from start to now, and gave up if gaveUp; it says whether that was
// late.
func (l *lateness) note(start, now time.Time, ttl time.Duration, gaveUp bool) bool {
	waited := now.Sub(start)
	if !gaveUp && waited < lateAfter(ttl) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := now.Add(ttl / 2); until.After(l.until) {
		l.until = until
	}
	l.waited, l.ttl = waited, ttl
	return true
}

// refusal is the cause of the refusal at now of a claim for an etcd lease
// of ttl, by a store holding live terms, or nil when the claim may go;
// then, if admit, the claim is counted as admitted until claimDone. The
// cause matches lease.ErrNotSent and ErrOverCapacity.
func (l *lateness) refusal(now time.Time, ttl time.Duration, live int, admit bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil || now.Sub(l.refusedAt) >= liveCountEvery {
		l.refused, l.refusedAt = l.refuse(now, ttl, live+l.claiming), now
	}
	if l.refused == nil && admit {
		l.claiming++
	}
	return l.refused
}

// claimDone ends the count of an admitted claim.
func (l *lateness) claimDone() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claiming--
}

// refuse is refusal's answer, made afresh for terms live and claimed.
// Called with l.mu held.
func (l *lateness) refuse(now time.Time, ttl time.Duration, live int) error {
	if now.Before(l.until) {
		return fmt.Errorf("%w: %w: keep-alives run late (one waited %v of its etcd lease's TTL %v for one of the %d call slots): no new terms until they are on time",
			lease.ErrNotSent, ErrOverCapacity, l.waited.Round(time.Millisecond), l.ttl, l.slots)
	}
	hold, period := l.renewHold, l.period
	if hold == 0 {
		// No renewal yet: one costs about what a claim does, half as
		// much again (a keep-alive and two committed reads, against a
		// grant and a transaction), and a claim storm's renewals come
		// due together: count three claims, until renewals tell.
		hold = l.claimHold * 3
	}
	if period == 0 {
		period = ttl / 2
	}
	// A term's renewals come one at a time: each keeps at most one
	// slot busy.
	if busy := float64(live+1) * min(float64(hold)/float64(period), 1); busy > float64(l.slots) {
		return fmt.Errorf("%w: %w: the %d terms held would keep %.0f of the %d call slots busy with renewals (each holds one %v, every %v): no new terms beyond them",
			lease.ErrNotSent, ErrOverCapacity, live, busy, l.slots, hold.Round(time.Millisecond), period.Round(time.Millisecond))
	}
	return nil
}
