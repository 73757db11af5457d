package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"syscall"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
)

// Defaults of Retry's backoff.
const (
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 30 * time.Second
)

// RetryOption configures Retry and WaitReady.
type RetryOption func(*retryConfig)

type retryConfig struct {
	base, max   time.Duration
	jitter      float64
	maxAttempts int
	notify      func(attempt int, err error, wait time.Duration)
	retryIf     func(error) bool
	rand        *rand.Rand
}

// WithBackoff sets the backoff: the wait after the n-th refusal is drawn
// from base × 2ⁿ⁻¹, capped at max. Defaults: DefaultBackoffBase and
// DefaultBackoffMax. base must be positive and max ≥ base.
func WithBackoff(base, max time.Duration) RetryOption {
	return func(c *retryConfig) { c.base, c.max = base, max }
}

// WithJitter sets the jittered fraction of each wait, in [0, 1]. The default
// 1 is full jitter: a wait of b becomes uniform in [0, b). 0 disables
// jitter (lock-step clients: only for tests and simulations).
func WithJitter(fraction float64) RetryOption {
	return func(c *retryConfig) { c.jitter = fraction }
}

// WithMaxAttempts bounds the calls to fn (n ≥ 1); the default 0 means no
// bound: ctx decides.
func WithMaxAttempts(n int) RetryOption {
	return func(c *retryConfig) { c.maxAttempts = n }
}

// WithNotify sets a hook called before each wait with the attempt number
// (from 1), the error that attempt returned, and the wait chosen.
func WithNotify(fn func(attempt int, err error, wait time.Duration)) RetryOption {
	return func(c *retryConfig) { c.notify = fn }
}

// WithRetryIf replaces the test for "retry this error" (by default: it
// matches ErrUpgradeInProgress). Errors matching ErrUpgradeFailed always
// stop Retry, whatever the predicate says.
func WithRetryIf(pred func(error) bool) RetryOption {
	return func(c *retryConfig) { c.retryIf = pred }
}

// WithRand sets the random source for jitter, for reproducible runs. A
// source is not safe for concurrent use: give each Retry its own.
func WithRand(src rand.Source) RetryOption {
	return func(c *retryConfig) {
		if src != nil {
			c.rand = rand.New(src)
		}
	}
}

func (c *retryConfig) validate() error {
	switch {
	case c.base <= 0:
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: backoff base %v must be positive", c.base))
	case c.max < c.base:
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: backoff max %v is below base %v", c.max, c.base))
	case !(c.jitter >= 0 && c.jitter <= 1):
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: jitter %v is not in [0, 1]", c.jitter))
	case c.maxAttempts < 0:
		return jujuerrors.NewNotValid(nil, fmt.Sprintf("upgrade: max attempts %d is negative", c.maxAttempts))
	case c.retryIf == nil:
		return jujuerrors.NewNotValid(nil, "upgrade: nil retry predicate")
	}
	return nil
}

func (c *retryConfig) float() float64 {
	if c.rand != nil {
		return c.rand.Float64()
	}
	return rand.Float64()
}

// backoff is the un-jittered wait after the given attempt (from 1).
func (c *retryConfig) backoff(attempt int) time.Duration {
	b := c.base
	for i := 1; i < attempt && b < c.max; i++ {
		if b > c.max/2 { // doubling would pass the cap (or overflow)
			return c.max
		}
		b *= 2
	}
	return min(b, c.max)
}

// wait chooses the wait after attempt. With a server hint the wait is the
// hint plus a jittered extra of up to max(backoff, hint) (capped), so a herd
// told "1 s" spreads over the next second instead of returning in
// lock-step; without one it is the jittered backoff. It saturates rather
// than overflow: a wrapped, negative wait would retry at once, which is
// exactly the hammering a huge Retry-After asks a client to avoid.
func (c *retryConfig) wait(attempt int, hint time.Duration) time.Duration {
	b := c.backoff(attempt)
	if hint > 0 {
		window := min(max(b, hint), c.max)
		extra := durationOf(c.jitter * c.float() * float64(window))
		if extra > math.MaxInt64-hint {
			return math.MaxInt64
		}
		return hint + extra
	}
	return durationOf((1-c.jitter)*float64(b) + c.jitter*c.float()*float64(b))
}

// durationOf converts a non-negative float of nanoseconds, saturating: a
// float64 of MaxInt64 rounds up to 2⁶³, which does not convert.
func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// hinter is an error carrying the server's wish for how long to wait.
type hinter interface{ retryHint() time.Duration }

func (e *InProgressError) retryHint() time.Duration { return e.RetryAfter }

// Retry calls fn until it succeeds, retrying only errors that match
// ErrUpgradeInProgress (see WithRetryIf). It returns nil on success, at once
// with fn's error when that is not retryable (an ErrUpgradeFailed error
// always stops it), and an error wrapping ctx.Err() and the last refusal
// when ctx ends while it waits. There is no overall limit but ctx (and
// WithMaxAttempts, if set).
//
// Between attempts it waits at least the refusal's RetryAfter plus jitter,
// otherwise a capped exponential backoff with full jitter (see WithBackoff,
// WithJitter). Waits run on clk (nil means clock.WallClock). If the server
// asks for a wait that ends after ctx's deadline, Retry returns at once with
// an error that says so and matches both the refusal (ErrUpgradeInProgress)
// and context.DeadlineExceeded; a jittered wait that would overrun the
// deadline is instead shortened so the last attempt still happens.
//
// fn receives ctx. Retrying is safe because a refused call was not executed
// (see Middleware); fn must itself turn responses into errors, e.g. with
// ErrorFromResponse.
func Retry(ctx context.Context, clk clock.Clock, fn func(context.Context) error, opts ...RetryOption) error {
	if clk == nil {
		clk = clock.WallClock
	}
	c := retryConfig{
		base: DefaultBackoffBase, max: DefaultBackoffMax, jitter: 1,
		retryIf: func(err error) bool { return errors.Is(err, ErrUpgradeInProgress) },
	}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return err
	}
	if fn == nil {
		return jujuerrors.NewNotValid(nil, "upgrade: nil func passed to Retry")
	}
	var last error
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return stopped(ctx, attempt-1, last)
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrUpgradeFailed) || !c.retryIf(err) {
			return err
		}
		last = err
		if c.maxAttempts > 0 && attempt >= c.maxAttempts {
			return fmt.Errorf("upgrade: gave up after %d attempts: %w", attempt, err)
		}
		var hint time.Duration
		var h hinter
		if errors.As(err, &h) {
			hint = h.retryHint()
		}
		wait := c.wait(attempt, hint)
		if deadline, ok := ctx.Deadline(); ok {
			switch left := time.Until(deadline); {
			case hint > 0 && hint >= left:
				return fmt.Errorf("upgrade: server asks to retry after %v but ctx's deadline is %v away: %w (%w)",
					hint, max(left, 0).Round(time.Millisecond), err, context.DeadlineExceeded)
			case left <= 0: // the deadline passed during fn; ctx is about to say so
				<-ctx.Done()
				return stopped(ctx, attempt, last)
			case wait >= left: // keep the jitter, inside what is left
				wait = hint + time.Duration(c.float()*float64(left-hint))
			}
		}
		if c.notify != nil {
			c.notify(attempt, err, wait)
		}
		t := clk.NewTimer(wait)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return stopped(ctx, attempt, last)
		}
	}
}

func stopped(ctx context.Context, attempts int, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("upgrade: stopped retrying after %d attempts: %w; last refusal: %w", attempts, ctx.Err(), last)
}

// notReadyError is WaitReady's "not yet": the server is not listening, or a
// proxy in front of it answered 502/503/504. Probing readiness is safe to
// repeat, so WaitReady retries these; Retry by default does not.
type notReadyError struct {
	cause error
	hint  time.Duration
}

func (e *notReadyError) Error() string            { return "upgrade: server not ready: " + e.cause.Error() }
func (e *notReadyError) Unwrap() error            { return e.cause }
func (e *notReadyError) retryHint() time.Duration { return e.hint }

// WaitReady polls url, which should be served by ReadyHandler, until it
// answers 2xx, for bootstrap-like tools that must not start work until the
// full API is up. It retries refusals (ErrUpgradeInProgress), a server that
// is not listening yet (connection refused or reset) and 502/503/504 from a
// proxy, with Retry's backoff and opts (a WithRetryIf in opts replaces that
// test). It returns nil once ready, at once on ErrUpgradeFailed or any other
// status, and an error wrapping ctx.Err() when ctx ends. A nil client means
// http.DefaultClient; a nil clk means clock.WallClock.
func WaitReady(ctx context.Context, clk clock.Clock, client *http.Client, url string, opts ...RetryOption) error {
	if client == nil {
		client = http.DefaultClient
	}
	if _, err := http.NewRequest(http.MethodGet, url, nil); err != nil {
		return jujuerrors.NewNotValid(err, "upgrade: readiness URL")
	}
	probe := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)) {
				return &notReadyError{cause: err}
			}
			return err
		}
		defer func() {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		if err := ErrorFromResponse(resp); err != nil {
			return err
		}
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return &notReadyError{cause: fmt.Errorf("%s answered %s", url, resp.Status), hint: parseRetryAfter(resp.Header)}
		}
		return fmt.Errorf("upgrade: readiness probe %s answered %s", url, resp.Status)
	}
	isNotReady := func(err error) bool {
		var nr *notReadyError
		return errors.Is(err, ErrUpgradeInProgress) || errors.As(err, &nr)
	}
	return Retry(ctx, clk, probe, append([]RetryOption{WithRetryIf(isNotReady)}, opts...)...)
}
