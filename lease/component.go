package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/coldstart-go/coldstart/internal/printable"
)

// A Tracker is a readiness component in its own words, with the shape of
// gate.Component (without importing gate): board.Follow("lease", tr) adds
// an entry that opens once the tracker knows who leads, and says why while
// it does not:
//
//	[-]lease locked for 2.04s (unknown: claim not confirmed: lease call timeout 250ms)

// Completed returns a channel closed once the tracker first knows whether
// it leads: the first Held or NotHeld. It stays closed: a later Unknown is
// for Check, Current and Lead to tell, not a readiness gate.
func (t *Tracker) Completed() <-chan struct{} { return t.life.known }

// Failed returns a channel closed when Close is called: a tracker has no
// other permanent failure (it retries every store error until closed).
func (t *Tracker) Failed() <-chan struct{} { return t.life.done }

// Cause returns an error matching ErrClosed once Close has been called,
// and nil before.
func (t *Tracker) Cause() error {
	select {
	case <-t.life.done:
		return fmt.Errorf("lease %q: %w", t.cfg.Name, ErrClosed)
	default:
		return nil
	}
}

// Detail says what the tracker knows in a few words, as Check would say it
// now: "unknown: claim not confirmed: lease call timeout 250ms",
// "held until 2026-11-30T06:26:57Z", "not-held: not the leader: held by
// "unit-1"", "closed". It is one line of at most about 1 KiB: control
// characters in a store's error are escaped (\n), and a longer text is cut.
func (t *Tracker) Detail() string {
	s := t.snap.Load()
	if s.closed {
		return "closed"
	}
	st, err := t.evaluate(s, t.cfg.Clock.Now(), 0)
	var rf *RenewalFailedError
	var nl *NotLeaderError
	switch {
	case err == nil:
		return fmt.Sprintf("%v until %s", st.State, st.Until.Format(time.RFC3339Nano))
	case errors.As(err, &rf):
		return printable.Text(fmt.Sprintf("%v: %s", st.State, rf.what()))
	case errors.As(err, &nl):
		return printable.Text(fmt.Sprintf("%v: %s", st.State, nl.what()))
	}
	return printable.Text(fmt.Sprintf("%v: %v", st.State, err))
}

// markKnown closes the Completed channel at the first Held or NotHeld
// snapshot s. Only the renewer calls it, from publish.
func (l *lifecycle) markKnown(s *snapshot) {
	if l.isKnown || s.closed || s.status.State == Unknown {
		return
	}
	l.isKnown = true
	close(l.known)
}
