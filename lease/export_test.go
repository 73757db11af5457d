package lease

import "time"

// ErrShortTermForTest is the error the tracker puts in a RenewalFailedError
// when the store confirmed less than a check asked.
var ErrShortTermForTest = errShortTerm

// WithSleepForTest returns cfg with slept in place of the host's sleep
// meter: slept(now) is how long the host has been suspended in all.
func WithSleepForTest(cfg Config, slept func(now time.Time) time.Duration) Config {
	cfg.sleep = sleepFunc(slept)
	return cfg
}

type sleepFunc func(time.Time) time.Duration

func (f sleepFunc) slept(now time.Time) time.Duration { return f(now) }

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
