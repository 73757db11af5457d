package upgrade

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry
// the details and match their sentinel.
var (
	// ErrUpgradeInProgress means the server refused the call because it is
	// still upgrading. The call was NOT executed, so it is safe to repeat:
	// wait (at least the error's RetryAfter) and retry, as Retry does.
	ErrUpgradeInProgress = errors.New("upgrade in progress")

	// ErrUpgradeFailed means the upgrade failed and the server will not
	// serve until an operator intervenes. Do not retry: stop and show the
	// error, which carries the cause.
	ErrUpgradeFailed = errors.New("upgrade failed")

	// ErrNoMatchingBinaries means no agent binaries fit the wanted version
	// and platform. Retrying the same request will not help: the
	// *NoMatchingBinariesError names what was wanted and what is available,
	// so fix the version asked for or publish the binaries.
	ErrNoMatchingBinaries = errors.New("no matching agent binaries")

	// ErrRestartRequired means new agent binaries are in place and the agent
	// must restart to run them. The restart is the caller's action (for a
	// worker: return the error so the agent exits and its supervisor
	// restarts it).
	ErrRestartRequired = errors.New("restart required")
)

// InProgressError is the refusal of a call made while the gate is upgrading.
// It matches ErrUpgradeInProgress. The refused call was not executed.
//
// Clients that honour the common "try again later" method, RetryAfter()
// time.Duration (coldstart/dialer does, for errors its dial function
// returns), find it with errors.As: the field's name keeps the type itself
// from having that method, so its As method hands out a view that has it.
type InProgressError struct {
	// Phase is the phase the server was in. It is zero when a remote
	// server named a phase this client does not know.
	Phase Phase
	// RetryAfter is how long the server asked callers to wait before trying
	// again; zero when the server gave no (usable) hint.
	RetryAfter time.Duration
}

// Error implements error.
func (e *InProgressError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("upgrade in progress (%s); call not executed; retry after %s", e.Phase.describe(), e.RetryAfter)
	}
	return fmt.Sprintf("upgrade in progress (%s); call not executed", e.Phase.describe())
}

// Is reports whether target is ErrUpgradeInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrUpgradeInProgress }

// As serves errors.As for an interface that asks for a RetryAfter()
// time.Duration method (say interface{ RetryAfter() time.Duration }): when
// the server gave a hint, it sets *target to the refusal with that method
// added, so a dialer or retry library that knows nothing of this package
// still waits as long as the server asked. Other targets are left to
// errors.As's ordinary matching.
func (e *InProgressError) As(target any) bool {
	if e == nil || e.RetryAfter <= 0 {
		return false // no hint: nothing to wait for
	}
	p := reflect.ValueOf(target) // errors.As has checked: a non-nil pointer
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return false
	}
	want, view := p.Elem().Type(), retryAfterView{e}
	if want.Kind() != reflect.Interface || !reflect.TypeOf(view).Implements(want) {
		return false
	}
	p.Elem().Set(reflect.ValueOf(view))
	return true
}

// retryAfterView is an *InProgressError with the RetryAfter method its
// field's name rules out (the method, declared here, shadows the promoted
// field). It still is the refusal: same message, matches
// ErrUpgradeInProgress, and unwraps to the *InProgressError.
type retryAfterView struct{ *InProgressError }

func (v retryAfterView) RetryAfter() time.Duration { return v.InProgressError.RetryAfter }
func (v retryAfterView) Unwrap() error             { return v.InProgressError }

// FailedError is the refusal of a call made after the upgrade failed. It
// matches ErrUpgradeFailed and unwraps to the cause.
type FailedError struct {
	// Cause is why the upgrade failed. For an error decoded from a response
	// (ErrorFromResponse) it carries the server's message only.
	Cause error
}

// Error implements error.
func (e *FailedError) Error() string {
	if e.Cause == nil {
		return "upgrade failed; call not executed"
	}
	return "upgrade failed: " + e.Cause.Error() + "; call not executed"
}

// Is reports whether target is ErrUpgradeFailed.
func (e *FailedError) Is(target error) bool { return target == ErrUpgradeFailed }

// Unwrap returns the cause.
func (e *FailedError) Unwrap() error { return e.Cause }

// remoteError is a failure cause received over the wire: only its text
// survives the trip.
type remoteError string

func (e remoteError) Error() string { return string(e) }
