package lease

import (
	"time"
)

// A suspend of the host stops Go's monotonic clock, so the tracker notes
// with each confirmation how long the host has slept in all; a reading that
// has grown since means Unknown (DESIGN.md, "Suspend").

// sleepMeter tells how long the host has been suspended in all, as of now
// (a time read from the tracker's clock just before).
type sleepMeter interface {
	slept(now time.Time) time.Duration
}

// hostSleep is this host's sleepMeter: on Linux, CLOCK_BOOTTIME against
// CLOCK_MONOTONIC (suspend_linux.go); nil where suspends are not detected.
var hostSleep sleepMeter

// suspendTolerance is the growth of the time slept that counts as a
// suspend.
const suspendTolerance = time.Millisecond

// suspended returns how long the host slept since snapshot s was confirmed,
// if that is a suspend, or 0.
func (t *Tracker) suspended(s *snapshot, now time.Time) time.Duration {
	if t.sleep == nil || s.status.State != Held {
		return 0
	}
	if d := t.sleep.slept(now) - s.slept; d >= suspendTolerance {
		return d
	}
	return 0
}

// slept is the sleep meter's reading at now, or 0 without one.
func (t *Tracker) slept(now time.Time) time.Duration {
	if t.sleep == nil {
		return 0
	}
	return t.sleep.slept(now)
}
