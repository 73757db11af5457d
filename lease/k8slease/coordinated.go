package k8slease

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/coldstart-go/coldstart/lease"
)

// YieldToPreferredHolder makes tr, a tracker on this Store, step down
// (tr.StepDown, and waits for it) whenever the Lease of the term tr holds,
// as the Store last read or wrote it, names another holder in
// spec.preferredHolder (KEP-4355); stepping down takes up to one renewal
// interval. A Lease so released is reserved for the preferred holder for
// its leaseDurationSeconds (1 s), and a term claimed after that is not
// yielded to the same preferred holder again. It runs until ctx ends,
// returning ctx.Err(), or until tr is closed (lease.ErrClosed); run it
// beside tr.Lead. Without it, the Store still keeps spec.strategy and
// spec.preferredHolder, and still reserves a released Lease. See
// DESIGN.md, "Coordinated leader election".
func (s *Store) YieldToPreferredHolder(ctx context.Context, tr *lease.Tracker) error {
	name := tr.Report().Name
	for {
		// Both channels are taken before the look, so no change is missed.
		st, changed := tr.Current()
		next := s.preferredBump(name)
		if tr.Report().Closed {
			return fmt.Errorf("lease %q: %w", name, lease.ErrClosed)
		}
		if l := s.last(name); prefersAnother(l) && !s.passedUpBy(l) && st.State == lease.Held &&
			st.Holder == holderOf(l) && st.Token == tokenOf(l) {
			err := tr.StepDown(ctx)
			switch {
			case errors.Is(err, lease.ErrClosed):
				return err
			case ctx.Err() != nil:
				return ctx.Err()
			}
			// Any other error is the release's: the term runs out on its
			// own, and the preferred holder claims then.
			continue
		}
		select {
		case <-next:
		case <-changed: // a new term, a renewal, Close
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notePassedUp records that out, a term of this Store, was claimed past a
// release reserved for preferred that ran out unclaimed.
func (s *Store) notePassedUp(out *coordinationv1.Lease, preferred string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.passedUp[out.Name] = passedUp{token: tokenOf(out), preferred: preferred}
}

// passedUpBy reports whether l's term was claimed past a reservation for
// the holder l still prefers: that holder had its turn and let it run out.
func (s *Store) passedUpBy(l *coordinationv1.Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.passedUp[l.Name]
	return ok && p.token == tokenOf(l) && p.preferred == preferredOf(l)
}

// preferredBump returns a channel closed the next time the Store sees a
// version of the Lease name whose preferredHolder names another holder.
func (s *Store) preferredBump(name string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.prefer[name]
	if !ok {
		c = make(chan struct{})
		s.prefer[name] = c
	}
	return c
}

// notePreferred wakes the YieldToPreferredHolder of l's name if l prefers
// another holder. s.mu must be held.
func (s *Store) notePreferred(l *coordinationv1.Lease) {
	if c, ok := s.prefer[l.Name]; ok && prefersAnother(l) {
		close(c)
		delete(s.prefer, l.Name)
	}
}

// prefersAnother reports whether l has a holder and names another in its
// preferredHolder.
func prefersAnother(l *coordinationv1.Lease) bool {
	h := holderOf(l)
	p := preferredOf(l)
	return h != "" && p != "" && p != h
}

func preferredOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.PreferredHolder == nil {
		return ""
	}
	return *l.Spec.PreferredHolder
}

// reservedFor is the holder a released Lease is kept for: its
// preferredHolder, if it has no holder; "" otherwise.
func reservedFor(l *coordinationv1.Lease) string {
	if holderOf(l) != "" {
		return ""
	}
	return preferredOf(l)
}

// standing is the party with the first claim to l: its holder, or the
// preferred holder it was released to; "" when anyone may claim it.
func standing(l *coordinationv1.Lease) string {
	if h := holderOf(l); h != "" {
		return h
	}
	return reservedFor(l)
}
