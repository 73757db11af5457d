package etcdlease

import (
	"context"
	"fmt"
	"sync"
)

// slots bounds the calls in flight. Waiters are served newest first: when
// thousands of calls start together, each with a deadline, the oldest
// waiters are the ones about to give up, and a slot handed to one of them
// is often wasted on a call that times out; the newest still has its whole
// timeout ahead. First-in first-out service under such a storm serves
// mostly calls that then time out.
type slots struct {
	mu      sync.Mutex
	size    int
	free    int
	waiting []*slotWaiter // a stack: the newest last
	gone    int           // waiters in waiting that gave up
}

type slotWaiter struct {
	ready chan struct{} // closed when handed a slot
	gone  bool
}

func newSlots(n int) *slots { return &slots{size: n, free: n} }

// acquire takes a slot for a caller's call, as wait does. A call refused
// (ErrOverCapacity) is counted NotSent in the store's StoreReport.
func (s *slots) acquire(ctx context.Context) error { return s.wait(ctx) }

// wait takes a slot, waiting while none is free. It returns ctx's error,
// without a slot, if ctx had ended already; if ctx ends while it waits, an
// error matching both ErrOverCapacity and ctx's error.
func (s *slots) wait(ctx context.Context) error {
	s.mu.Lock()
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Handed a slot as ctx ended: pass it on.
		s.mu.Unlock()
		s.release()
	default:
		w.gone = true
		s.gone++
		waiting := len(s.waiting) - s.gone
		s.compact()
		s.mu.Unlock()
		return fmt.Errorf("%w: all %d call slots stayed busy (%d other calls waiting): %w", ErrOverCapacity, s.size, waiting, ctx.Err())
	}
	return ctx.Err()
}

// release returns a slot: to the newest waiter, if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// compact drops the waiters that gave up once they are most of the stack,
// so that a stack whose bottom is never reached does not grow without
// bound. Called with s.mu held.
func (s *slots) compact() {
	if s.gone < 64 || 2*s.gone < len(s.waiting) {
		return
	}
	kept := s.waiting[:0]
	for _, w := range s.waiting {
		if !w.gone {
			kept = append(kept, w)
		}
	}
	clear(s.waiting[len(kept):])
	s.waiting, s.gone = kept, 0
}
