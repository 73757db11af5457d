package lease

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// The tracker's promise is a deadline on Go's monotonic clock, exact while
// that clock runs. It stops in two cases the tracker can see: a suspend of
// the host and a paused VM. With each confirmation the tracker notes what
// the host's clocks say (clockReading); a later reading that shows either
// means Unknown until the store confirms again (DESIGN.md, "A stopped
// clock").

// clockReading is what the host's clocks say at a moment, both figures
// totals whose growth is the evidence.
type clockReading struct {
	// slept is boot time − monotonic time: how long the host has been
	// suspended in all. It grows by the time slept.
	slept time.Duration
	// skew is wall time − monotonic time, from an epoch. It grows when
	// the wall clock is stepped ahead of the monotonic one: after a
	// suspend, by the time slept; after a VM pause, once the guest's wall
	// clock is corrected; or by hand. Slewing moves neither.
	skew time.Duration
}

// clockMeter reads the host's clocks as of now (a time read from the
// tracker's clock just before). It is on Check's path: cheap.
type clockMeter interface {
	read(now time.Time) clockReading
}

// hostClocks is this host's clockMeter: the wall clock against the
// monotonic reading of a time.Time everywhere, and on Linux boot time
// against monotonic time (bootSlept, suspend_linux.go).
var hostClocks clockMeter = newHostClock(bootSlept)

// hostClock reads the host's clocks, making system calls only when the
// wall and monotonic readings of now have moved apart (DESIGN.md, "A
// stopped clock").
type hostClock struct {
	epoch     time.Time // with a monotonic reading
	epochWall time.Time // epoch without it
	// bootSlept reads boot time − monotonic time; nil where it cannot.
	bootSlept func() (time.Duration, bool)
	last      atomic.Pointer[clockReading] // the latest reading taken afresh
}

func newHostClock(bootSlept func() (time.Duration, bool)) *hostClock {
	now := time.Now()
	c := &hostClock{epoch: now, epochWall: now.Round(0), bootSlept: bootSlept}
	var r clockReading
	if bootSlept != nil {
		var ok bool
		if r.slept, ok = bootSlept(); !ok {
			c.bootSlept = nil // not readable here
		}
	}
	c.last.Store(&r)
	return c
}

// skew is how far now's wall clock is ahead of its monotonic clock, from
// the epoch's; 0 for a time without a monotonic reading (now.Sub then
// uses the wall clock), so another Clock than the wall clock shows none.
func (c *hostClock) skew(now time.Time) time.Duration {
	return now.Round(0).Sub(c.epochWall) - now.Sub(c.epoch)
}

func (c *hostClock) read(now time.Time) clockReading {
	r := c.last.Load()
	skew := c.skew(now)
	if d := skew - r.skew; d > -suspendTolerance && d < suspendTolerance {
		return clockReading{slept: r.slept, skew: skew}
	}
	if now == now.Round(0) {
		return clockReading{slept: r.slept} // no monotonic reading: no skew
	}
	// time.Now reads the wall clock, then the monotonic one: a thread
	// descheduled between the two gives a skew too small, never too
	// large. The largest of a few readings is the skew.
	for range 3 {
		skew = max(skew, c.skew(time.Now()))
	}
	fresh := clockReading{slept: r.slept, skew: skew}
	if c.bootSlept != nil {
		if s, ok := c.bootSlept(); ok {
			fresh.slept = s
		}
	}
	c.last.Store(&fresh)
	return fresh
}

// suspendTolerance is the growth of either figure that counts as a stopped
// clock: the clocks are read microseconds apart, a stop lasts seconds.
const suspendTolerance = time.Millisecond

// stopped says why the monotonic clock may have stopped since snapshot s
// was confirmed (a suspendError or a pauseError), or nil.
func (t *Tracker) stopped(s *snapshot, now time.Time) error {
	if t.clocks == nil || s.status.State != Held {
		return nil
	}
	return clockStopped(s.clocks, t.clocks.read(now))
}

// clockStopped compares reading now with reading then: boot time gained on
// the monotonic clock is a suspend; the wall clock gained on it, with no
// boot time gained, a VM pause (or the wall clock set ahead: one store call
// tells). A wall clock set back is no evidence: no stopped clock does that.
func clockStopped(then, now clockReading) error {
	if d := now.slept - then.slept; d >= suspendTolerance {
		return suspendError{slept: d}
	}
	if d := now.skew - then.skew; d >= suspendTolerance {
		return pauseError{jump: d}
	}
	return nil
}

// readClocks is the clock meter's reading at now, or none without one.
func (t *Tracker) readClocks(now time.Time) clockReading {
	if t.clocks == nil {
		return clockReading{}
	}
	return t.clocks.read(now)
}

// stillStopped is the cause of an ambiguous answer err given after snapshot
// old: while the Unknown that a stopped clock began lasts, its cause says
// that first, so that Check and Report still tell why.
func stillStopped(old *snapshot, err error) error {
	var se suspendError
	var pe pauseError
	switch {
	case old.status.State != Unknown:
		return err
	case errors.As(old.cause, &se):
		return fmt.Errorf("%w; not confirmed since: %w", se, err)
	case errors.As(old.cause, &pe):
		return fmt.Errorf("%w; not confirmed since: %w", pe, err)
	}
	return err
}
