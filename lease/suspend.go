package lease

import (
	"time"
)

// Suspend: Go's monotonic clock (CLOCK_MONOTONIC on Linux) stops while the
// host is suspended (golang/go#24595), and so does every deadline and timer
// the tracker keeps on it. A holder that resumes after a suspend of S still
// sees its Until ahead, though for the store and every other holder it lies
// S in the past; the late-timer check runs on the same clock and cannot see
// it either. So the tracker asks the host how long it has slept in all
// (sleepMeter), notes it with each confirmation, and a later reading that has
// grown means the promise may be over: Unknown until the store confirms
// again, never Held, never NotLeader.

// sleepMeter tells how long the host has been suspended in all, as of now
// (a time read from the tracker's clock just before).
type sleepMeter interface {
	slept(now time.Time) time.Duration
}

// hostSleep is this host's sleepMeter: on Linux, CLOCK_BOOTTIME against
// CLOCK_MONOTONIC (suspend_linux.go); nil where suspends are not detected.
var hostSleep sleepMeter

// suspendTolerance is the growth of the time slept that counts as a
// suspend. The two clocks are read by two calls, microseconds apart; a real
// suspend takes seconds.
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
