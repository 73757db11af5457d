package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The errors of the Tracker and the TokenGuard. A store's answers match
// the sentinels of package leasestore (ErrHeld, ErrNotHeld, ErrNotSent,
// ErrUnconfirmed); the Tracker's errors unwrap to them.
var (
	// ErrNotLeader is definitive: another holder has the lease, the store
	// said our term is over, or this tracker stepped down. Do not act as
	// leader; follow Current, or check again later. The error is a
	// *NotLeaderError naming the holder when it is known.
	ErrNotLeader = errors.New("lease: not the leader")
	// ErrRenewalFailed is ambiguous: the store could not confirm the lease
	// for as long as the check asked. It is not a loss. While the Status
	// returned with it says Held, the lease is still ours until
	// Status.Until: finish or fence what you must before then, and check
	// again (the tracker keeps retrying). Once the State is Unknown, act as
	// if not leader until a check answers Held. The error is a
	// *RenewalFailedError carrying the cause.
	ErrRenewalFailed = errors.New("lease renewal not confirmed")
	// ErrClosed means the tracker was closed. It never leads again; make a
	// new tracker to claim the lease again.
	ErrClosed = errors.New("lease tracker closed")
	// ErrStaleToken is a TokenGuard's refusal: the token is older than one
	// it has admitted, so its holder has been deposed. Do not apply the
	// write; the caller is no longer the leader (a *StaleTokenError).
	ErrStaleToken = errors.New("lease: stale fencing token")
)

// NotLeaderError is the definitive answer "another holder has the lease"
// (or our term is over, or this tracker stepped down). It matches
// ErrNotLeader. When the store said so, it unwraps to the store's answer
// (a *HeldError or an error matching ErrNotHeld); after a step-down, or
// when a Lead function's term was replaced by a newer one, it unwraps to
// the tracker's own account (the latter matching ErrNotHeld).
type NotLeaderError struct {
	Name   string // the lease
	Holder string // who holds it now; empty when not known
	Err    error  // why: the store's definitive answer, or the tracker's
}

func (e *NotLeaderError) Error() string { return fmt.Sprintf("lease %q: %s", e.Name, e.what()) }

// what is the error without the lease's name.
func (e *NotLeaderError) what() string {
	if e.Holder == "" {
		return fmt.Sprintf("not the leader: %v", e.Err)
	}
	return fmt.Sprintf("not the leader: held by %q", e.Holder)
}

// Is reports whether target is ErrNotLeader.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// Unwrap returns Err.
func (e *NotLeaderError) Unwrap() error { return e.Err }

// RenewalFailedError is the ambiguous answer "the store could not confirm
// the lease". It matches ErrRenewalFailed and unwraps to the cause (a store
// timeout, a cancelled call, a suspend of the host, a paused VM).
type RenewalFailedError struct {
	Name string // the lease
	Err  error  // why the lease could not be confirmed
	// Until is the end of the validity last confirmed by the store
	// (already less the Margin). It is a promise only while the Status
	// returned with the error says Held.
	Until time.Time
}

func (e *RenewalFailedError) Error() string { return fmt.Sprintf("lease %q: %s", e.Name, e.what()) }

// what is the error without the lease's name.
func (e *RenewalFailedError) what() string {
	if e.Until.IsZero() {
		return fmt.Sprintf("claim not confirmed: %v", e.Err)
	}
	return fmt.Sprintf("renewal not confirmed (last confirmed until %s): %v", e.Until.Format(time.RFC3339Nano), e.Err)
}

// Is reports whether target is ErrRenewalFailed.
func (e *RenewalFailedError) Is(target error) bool { return target == ErrRenewalFailed }

// Unwrap returns the cause.
func (e *RenewalFailedError) Unwrap() error { return e.Err }

// StaleTokenError is a TokenGuard's refusal of Token, older than Newest,
// the newest token it has admitted. It matches ErrStaleToken.
type StaleTokenError struct {
	Token  uint64
	Newest uint64
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing token %d refused: token %d was admitted, so its holder has been deposed",
		e.Token, e.Newest)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// The causes a tracker puts in a RenewalFailedError or NotLeaderError
// besides a store's error: these sentinels, and the typed errors after
// them, which carry a figure (how long asleep, how far the clock jumped,
// which timeout).
var (
	errNotClaimed  = errors.New("no answer from the store yet")
	errSteppedDown = errors.New("this tracker stepped down")
	errShortTerm   = errors.New("lease confirmed, but for less time than the check asked")
	errRanOut      = errors.New("validity ran out before the store confirmed a renewal")
	errSuspended   = errors.New("the host was suspended: its monotonic clock stopped")
	errClockJumped = errors.New("the wall clock jumped ahead of the monotonic clock: the VM may have been paused, stopping it")
)

// suspendError is the cause of Unknown after a suspend of the host
// (suspend.go): how long it slept since the store last confirmed.
type suspendError struct{ slept time.Duration }

func (e suspendError) Error() string {
	return fmt.Sprintf("%v (%v since the store last confirmed the lease)", errSuspended, e.slept)
}

func (e suspendError) Unwrap() error { return errSuspended }

// pauseError is the cause of Unknown after the wall clock gained on the
// monotonic clock with no suspend (suspend.go): a VM paused and its wall
// clock corrected since, or the wall clock set ahead.
type pauseError struct{ jump time.Duration }

func (e pauseError) Error() string {
	return fmt.Sprintf("%v (%v since the store last confirmed the lease)", errClockJumped, e.jump)
}

func (e pauseError) Unwrap() error { return errClockJumped }

// callTimeoutError is the cause of a store call cut off by the tracker: at
// the call timeout (Duration/4), or earlier at the end of the validity it
// would extend. It matches context.DeadlineExceeded.
type callTimeoutError struct {
	timeout  time.Duration
	validity bool // cut off at the end of the validity
}

func (e callTimeoutError) Error() string {
	if e.validity {
		return fmt.Sprintf("lease call cut off after %v, when the validity it would extend ran out", e.timeout)
	}
	return fmt.Sprintf("lease call timeout %v", e.timeout)
}

func (e callTimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
