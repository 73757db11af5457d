package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

const (
	defaultBackoffBase = 250 * time.Millisecond
	defaultBackoffMax  = 30 * time.Second
)

// RetryOption configures Retry, WaitReady, RetryTransport and
// grpcupgrade's client interceptors. A nil RetryOption is ignored. Options
// apply in order; a later one of a kind wins.
type RetryOption func(*retryConfig)

type retryConfig struct {
	clk     clock.Clock
	policy  backoff.Policy
	notify  func(attempt int, err error, wait time.Duration)
	retryIf func(error) bool
	wake    func() <-chan struct{}
}

// WithBackoff sets the backoff: the wait after the n-th refusal is drawn
// from base × 2ⁿ⁻¹, capped at max. Defaults: 250 ms and 30 s. base must be
// positive and max ≥ base.
func WithBackoff(base, max time.Duration) RetryOption {
	return func(c *retryConfig) { c.policy.Min, c.policy.Max = base, max }
}

// WithClock sets the clock the waits run on (nil, the default, means
// clock.WallClock).
func WithClock(clk clock.Clock) RetryOption {
	return func(c *retryConfig) { c.clk = clk }
}

// WithNotify sets a hook called before each wait with the attempt number
// (from 1), the error that attempt returned, and the wait chosen (nil, the
// default, means none). It runs on the calling goroutine, inside the call.
func WithNotify(fn func(attempt int, err error, wait time.Duration)) RetryOption {
	return func(c *retryConfig) { c.notify = fn }
}

// WithRetryIf replaces the test for "retry this error" (by default: it
// matches ErrUpgradeInProgress). Errors matching ErrUpgradeFailed always
// stop Retry, whatever the predicate says. A nil pred is not valid: Retry
// returns an error matching errors.NotValid (github.com/juju/errors).
func WithRetryIf(pred func(error) bool) RetryOption {
	return func(c *retryConfig) { c.retryIf = pred }
}

// WithWake lets a client in the server's own process learn the end of an
// upgrade from its gate instead of sleeping out the wait: a wait ends early
// when the channel wake returns closes, e.g. WithWake(g.Completed). wake
// is called before each wait; a channel that has already ended one wait
// of a call ends no other (a server still refusing is waited out as
// usual). nil, the default, means none.
func WithWake(wake func() <-chan struct{}) RetryOption {
	return func(c *retryConfig) { c.wake = wake }
}

// newRetryConfig applies opts over the defaults and validates the result.
func newRetryConfig(opts []RetryOption) (retryConfig, error) {
	c := retryConfig{
		policy:  backoff.Policy{Min: defaultBackoffBase, Max: defaultBackoffMax, Jitter: 1},
		retryIf: func(err error) bool { return errors.Is(err, ErrUpgradeInProgress) },
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.clk == nil {
		c.clk = clock.WallClock
	}
	switch {
	case c.policy.Min <= 0:
		return c, jujuerrors.NotValidf("backoff base %v (must be positive)", c.policy.Min)
	case c.policy.Max < c.policy.Min:
		return c, jujuerrors.NotValidf("backoff max %v (must be at least base %v)", c.policy.Max, c.policy.Min)
	case c.retryIf == nil:
		return c, jujuerrors.NotValidf("nil retry predicate")
	}
	return c, nil
}

// wait chooses the wait after attempt: the server's hint exactly when
// there is one, else the jittered backoff (DESIGN.md, "One jitter").
func (c *retryConfig) wait(attempt int, hint time.Duration) time.Duration {
	if hint > 0 {
		return hint
	}
	return c.policy.Next(attempt)
}

// hintOf is the server's RetryAfter hint; zero if none.
func hintOf(err error) time.Duration {
	var h interface{ RetryAfter() time.Duration }
	if errors.As(err, &h) {
		return h.RetryAfter()
	}
	return 0
}

// Retry calls fn until it succeeds, retrying only errors that match
// ErrUpgradeInProgress (see WithRetryIf). It returns nil on success, at once
// with fn's error when that is not retryable (an ErrUpgradeFailed error
// always stops it), and an error wrapping ctx.Err() and the last refusal
// when ctx ends while it waits. There is no attempt cap and no overall
// limit but ctx.
//
// Between attempts it waits exactly the refusal's RetryAfter (found with
// errors.As on interface{ RetryAfter() time.Duration }), adding no jitter
// (DESIGN.md, "One jitter"); without a hint, a capped exponential backoff
// with full jitter (WithBackoff). Waits run on WithClock's clock, and
// WithNotify sees each. If the server's wait ends after ctx's deadline,
// Retry returns at once with an error matching both the refusal and
// context.DeadlineExceeded; a backoff that would overrun it is shortened
// once for a last attempt, after which Retry waits for the deadline.
//
// fn receives ctx and must itself turn responses into errors, e.g. with
// ErrorFromResponse.
func Retry(ctx context.Context, fn func(context.Context) error, opts ...RetryOption) error {
	c, err := newRetryConfig(opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return jujuerrors.NotValidf("nil func")
	}
	return c.run(ctx, fn)
}

func (c *retryConfig) run(ctx context.Context, fn func(context.Context) error) error {
	var last error
	var woken <-chan struct{} // the wake channel that ended a wait already
	lastChance := false       // a backoff was already cut to fit inside the deadline
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return c.stopped(ctx, attempt-1, last)
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrUpgradeFailed) || !c.retryIf(err) {
			return err
		}
		last = err
		hint := hintOf(err)
		wait := c.wait(attempt, hint)
		if deadline, ok := ctx.Deadline(); ok {
			switch left := time.Until(deadline); {
			case hint > 0 && hint >= left:
				// err names the server's wait; say only what it outlasts.
				return fmt.Errorf("upgrade: the server's wait outlasts ctx's deadline, %v away: %w (%w)",
					max(left, 0).Round(time.Millisecond), err, context.DeadlineExceeded)
			case left <= 0: // the deadline passed during fn; ctx is about to say so
				<-ctx.Done()
				return c.stopped(ctx, attempt, last)
			case wait >= left && lastChance: // DESIGN.md, "Retry and ctx's deadline"
				<-ctx.Done()
				return c.stopped(ctx, attempt, last)
			case wait >= left: // a backoff (a hint < left is kept): one last attempt, jittered inside what is left
				wait, lastChance = left-backoff.Jitter(left, 1), true
			}
		}
		if c.notify != nil {
			c.notify(attempt, err, wait)
		}
		if c.sleep(ctx, wait, &woken) != nil {
			return c.stopped(ctx, attempt, last)
		}
	}
}

// sleep waits d on c's clock, or until ctx ends (its error), or until the
// wake channel closes, unless it is *woken, which it becomes.
func (c *retryConfig) sleep(ctx context.Context, d time.Duration, woken *<-chan struct{}) error {
	var wake <-chan struct{}
	if c.wake != nil {
		if wake = c.wake(); wake == *woken {
			wake = nil
		}
	}
	if wake == nil {
		return backoff.Sleep(ctx, c.clk, d)
	}
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
	case <-wake:
		*woken = wake
	}
	return nil
}

// stopped is the error of a run whose ctx ended, after attempts attempts.
func (c *retryConfig) stopped(ctx context.Context, attempts int, last error) error {
	if last == nil {
		return ctx.Err()
	}
	noun := "attempts"
	if attempts == 1 {
		noun = "attempt"
	}
	return fmt.Errorf("upgrade: stopped retrying after %d %s: %w; last refusal: %w", attempts, noun, ctx.Err(), last)
}

// notReadyError is WaitReady's "not yet": the server is not listening, or a
// proxy in front of it answered 502/503/504.
type notReadyError struct {
	cause error
	hint  time.Duration
}

func (e *notReadyError) Error() string             { return "upgrade: server not ready: " + e.cause.Error() }
func (e *notReadyError) Unwrap() error             { return e.cause }
func (e *notReadyError) RetryAfter() time.Duration { return e.hint }

// WaitReady polls url, which should be served by ReadyHandler, until it
// answers 2xx. It retries refusals (ErrUpgradeInProgress), a server that
// is not listening yet (connection refused or reset) and 502/503/504 from a
// proxy, with Retry's backoff and opts (a WithRetryIf in opts replaces that
// test). It returns nil once ready, at once on ErrUpgradeFailed or any other
// status, and an error wrapping ctx.Err() when ctx ends. A nil client means
// http.DefaultClient.
func WaitReady(ctx context.Context, client *http.Client, url string, opts ...RetryOption) error {
	if client == nil {
		client = http.DefaultClient
	}
	if _, err := http.NewRequest(http.MethodGet, url, nil); err != nil {
		return jujuerrors.NotValidf("readiness URL %q (must parse: %v)", url, err)
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
	return Retry(ctx, probe, append([]RetryOption{WithRetryIf(isNotReady)}, opts...)...)
}
