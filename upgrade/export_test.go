package upgrade

import "time"

// RetryWait exposes the wait Retry would choose after attempt, given a
// server hint, so tests can check the jitter distribution without timers.
func RetryWait(attempt int, hint time.Duration, opts ...RetryOption) (time.Duration, error) {
	c := retryConfig{base: DefaultBackoffBase, max: DefaultBackoffMax, jitter: 1, retryIf: func(error) bool { return true }}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return 0, err
	}
	return c.wait(attempt, hint), nil
}
