package gate

import (
	"errors"
	"fmt"
)

var (
	// ErrFailed matches the error of every gate that failed. Its cause is
	// in the chain too: errors.Is(err, cause) holds. A failed gate never
	// unlocks; stop waiting and report the cause (or make a new gate).
	ErrFailed = errors.New("gate failed")

	// ErrUnlocked is how a Flag made on a locked gate ends once the gate
	// unlocks. It is not a fault: a dependency engine should restart the
	// flag, and with it every worker that depends on the flag, so they see
	// the new value.
	ErrUnlocked = errors.New("gate unlocked: restart to see the new value")

	// errNoParts fails AnyOf with no parts, which can never unlock.
	errNoParts = errors.New("no parts, so it can never unlock")
)

// FailedError is the error of a gate that failed: it names the gate and
// carries the cause. It matches ErrFailed and, through Unwrap, the cause.
type FailedError struct {
	Gate string // the failed gate's name
	Err  error  // the cause given to Fail
}

func (e *FailedError) Error() string { return fmt.Sprintf("gate %q failed: %v", e.Gate, e.Err) }

// Unwrap returns the cause.
func (e *FailedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }
