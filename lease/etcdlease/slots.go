package etcdlease

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
)

// slots bounds the calls a store has in flight (WithMaxInFlight), in two
// classes: renewals and revokes of terms held, served first and oldest
// term (lowest token) first — only a Store sends them, as a SessionStore
// renews no term by a call — and every other call, served newest first.
// See DESIGN.md, "Call slots: renewals first, then the newest call".
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
// waiting while none is free. It returns ctx's cause (context.Cause),
// without a slot, if ctx had ended already; if ctx ends while it waits, an
// error matching both ErrOverCapacity and ctx's cause, which says what
// held the call back (see heldBackLocked). A call refused so is counted
// NotSent in the store's StoreReport.
func (s *slots) acquire(ctx context.Context) error { return s.take(ctx, false, 0) }

// acquireRenewal takes a slot for a renewal or a revoke of the term
// token, as acquire does, ahead of every call that renews nothing and of
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
// ended: it matches ErrOverCapacity and ctx's cause, and says what the call
// waited behind. Called with s.mu held.
func (s *slots) heldBackLocked(ctx context.Context) error {
	waiting := len(s.waiting) - s.gone + len(s.renewing) - s.renewingGone
	return fmt.Errorf("%w: held back behind %d calls in flight, one per call slot (%d other calls waiting): %w",
		ErrOverCapacity, s.size-s.free, waiting, context.Cause(ctx))
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
