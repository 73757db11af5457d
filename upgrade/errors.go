package upgrade

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry
// the details and match their sentinel. Beside them, an invalid argument
// (Enter(PhaseComplete), SetRetryAfter(0), RunSteps or Retry with a nil func,
// WithRetryIf(nil), a backoff max below its base, a readiness URL that
// does not parse) returns an error matching errors.NotValid from
// github.com/juju/errors and changes nothing: fix the call, do not retry.
var (
	// ErrUpgradeInProgress means the server refused the call because it is
	// still upgrading. The call was NOT executed, so it is safe to repeat:
	// wait (at least the error's RetryAfter) and retry, as Retry does.
	ErrUpgradeInProgress = errors.New("upgrade: in progress")

	// ErrUpgradeFailed means the upgrade failed and the server will not
	// serve until an operator intervenes. Do not retry: stop and show the
	// error, which carries the cause.
	ErrUpgradeFailed = errors.New("upgrade: failed")
)

// InProgressError is the refusal of a call made while the gate is upgrading.
// It matches ErrUpgradeInProgress. The refused call was not executed. Its
// RetryAfter method is the common "try again later" signal, found by
// errors.As on interface{ RetryAfter() time.Duration } (coldstart/dialer).
type InProgressError struct {
	// Phase is the phase the server was in. It is zero when a remote
	// server named a phase this client does not know.
	Phase Phase
	// RetryDelay is how long the server asked callers to wait; zero when
	// it gave no (usable) hint.
	RetryDelay time.Duration
	// PeerReady reports that the server, draining, knows a ready peer that
	// can serve the call: an agent may go there instead of waiting. A
	// controller's own clients wait for home.
	PeerReady bool
}

// Error implements error.
func (e *InProgressError) Error() string {
	msg := fmt.Sprintf("upgrade in progress (%s); call not executed", e.Phase.describe())
	if e.PeerReady {
		msg += "; a ready peer can serve it"
	}
	if e.RetryDelay > 0 {
		msg += fmt.Sprintf("; retry after %s", e.RetryDelay)
	}
	return msg
}

// Is reports whether target is ErrUpgradeInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrUpgradeInProgress }

// RetryAfter is the server's hint: how long to wait before trying again
// (zero: no hint, use your own backoff). It is safe on a nil error.
func (e *InProgressError) RetryAfter() time.Duration {
	if e == nil {
		return 0
	}
	return e.RetryDelay
}

// FailedError is the refusal of a call made after the upgrade failed. It
// matches ErrUpgradeFailed and unwraps to the cause.
type FailedError struct {
	// Err is why the upgrade failed. For an error decoded from a response
	// (ErrorFromResponse) it carries the server's text of the cause only.
	Err error
}

// Error implements error.
func (e *FailedError) Error() string {
	if e.Err == nil {
		return "upgrade failed; call not executed"
	}
	return "upgrade failed: " + e.Err.Error() + "; call not executed"
}

// Is reports whether target is ErrUpgradeFailed.
func (e *FailedError) Is(target error) bool { return target == ErrUpgradeFailed }

// Unwrap returns the cause.
func (e *FailedError) Unwrap() error { return e.Err }

// remoteError is a failure cause received over the wire: only its text
// survives the trip.
type remoteError string

func (e remoteError) Error() string { return string(e) }
