package gate

import (
	"errors"
	"fmt"
)

var (
	// ErrUnlocked is how a Flag made on a locked gate ends once the gate
	// unlocks. It is not a fault: a dependency engine should restart the
	// flag, and with it every worker that depends on the flag, so they see
	// the new value.
	ErrUnlocked = errors.New("gate unlocked: restart to see the new value")

	// errFailed is in the chain of every failed gate's error, beside the
	// cause given to Fail (the cause itself when Fail was given nil).
	errFailed = errors.New("gate failed")

	// errNoParts fails AnyOf with no parts, which can never unlock.
	errNoParts = errors.New("no parts, so it can never unlock")

	// errFailedChannel fails a Watch entry whose failed channel closed.
	errFailedChannel = errors.New("its failed channel is closed")
)

// failedError is the error of a gate that failed: it names the gate and
// carries the cause, which callers match with errors.Is.
type failedError struct {
	Gate string // the failed gate's name
	Err  error  // the cause given to Fail
}

func (e *failedError) Error() string { return fmt.Sprintf("gate %q failed: %v", e.Gate, e.Err) }

// Unwrap returns the cause.
func (e *failedError) Unwrap() error { return e.Err }

// Is reports whether target is errFailed.
func (e *failedError) Is(target error) bool { return target == errFailed }
