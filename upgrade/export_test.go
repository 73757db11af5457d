package upgrade

import (
	"net/http"
	"time"

	"github.com/coldstart-go/coldstart/upgrade/internal/spread"
)

// Internals the tests name: the wire header, the defaults.
const (
	HeaderCode         = headerCode
	DefaultRetryAfter  = defaultRetryAfter
	DefaultBackoffBase = defaultBackoffBase
	MaxRetryAfter      = spread.MaxWait
)

// WithJitter sets the jittered fraction of Retry's waits (production uses
// 1, full jitter), so tests can make waits exact with 0.
func WithJitter(fraction float64) RetryOption {
	return func(c *retryConfig) { c.policy.Jitter = fraction }
}

// RetryWait exposes the wait Retry would choose after attempt, given a
// server hint, so tests can check the jitter distribution without timers.
func RetryWait(attempt int, hint time.Duration, opts ...RetryOption) (time.Duration, error) {
	c, err := newRetryConfig(opts)
	if err != nil {
		return 0, err
	}
	return c.wait(attempt, hint), nil
}

// ParseRetryAfter is the client's reading of a response's Retry-After.
func ParseRetryAfter(h http.Header) time.Duration { return parseRetryAfter(h) }
