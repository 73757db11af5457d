package lease

import (
	"errors"
	"time"
)

// ErrShortTermForTest is the error the tracker puts in a RenewalFailedError
// when the store confirmed less than a check asked.
var ErrShortTermForTest = errShortTerm

// WithClocksForTest returns cfg with read in place of the host's clocks:
// read(now) says how long the host has been suspended in all (boot time −
// monotonic time) and how far the wall clock is ahead of the monotonic one
// (from any epoch). A test suspends the host by raising slept while the
// testclock — the monotonic clock — stands still, and pauses a VM by
// raising skew alone.
func WithClocksForTest(cfg Config, read func(now time.Time) (slept, skew time.Duration)) Config {
	cfg.clocks = clocksFunc(read)
	return cfg
}

type clocksFunc func(time.Time) (time.Duration, time.Duration)

func (f clocksFunc) read(now time.Time) clockReading {
	slept, skew := f(now)
	return clockReading{slept: slept, skew: skew}
}

// LoadForTest is what a test makes the tracker read as the process's
// load, each figure a total: periods and time its cgroup throttled it, GC
// pauses and goroutine delays of at least the bound the tracker asks for.
type LoadForTest struct {
	Throttled             uint64
	ThrottledFor          time.Duration
	GCPauses, SchedDelays uint64
}

// WithLoadForTest returns cfg with read in place of the process's load.
func WithLoadForTest(cfg Config, read func(over time.Duration) LoadForTest) Config {
	cfg.load = loadFunc(read)
	return cfg
}

type loadFunc func(time.Duration) LoadForTest

func (f loadFunc) read(over time.Duration) loadReading {
	l := f(over)
	return loadReading{throttled: l.Throttled, throttledFor: l.ThrottledFor, gcPauses: l.GCPauses, schedDelays: l.SchedDelays}
}

// RateToleranceForTest is how much slower than the store's clock a
// tracker's clock may run (Margin / (2×Duration)).
func RateToleranceForTest(cfg Config) float64 { return cfg.rateTolerance() }

// WithoutJitterForTest returns cfg with every wait exact: no scheduled
// call or retry comes early, and a follower woken by a release claims at
// once, so that tests can assert schedules.
func WithoutJitterForTest(cfg Config) Config {
	cfg.noJitter = true
	return cfg
}

// WithJitterForTest undoes WithoutJitterForTest: cfg's waits are jittered
// as a user's are.
func WithJitterForTest(cfg Config) Config {
	cfg.noJitter = false
	return cfg
}

// JitterOfForTest is the most a scheduled call of a tracker with cfg comes
// early, as a fraction of its wait.
func JitterOfForTest(cfg Config) float64 { return cfg.jitter(renewJitter) }

// StoppedClockForTest reports whether err says the monotonic clock may
// have stopped (a suspend, a paused VM).
func StoppedClockForTest(err error) bool {
	return errors.Is(err, errSuspended) || errors.Is(err, errClockJumped)
}
