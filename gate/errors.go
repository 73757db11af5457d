package gate

import (
	"errors"
	"fmt"

	"github.com/coldstart-go/coldstart/internal/printable"
)

var (
	// ErrUnlocked is how a Flag made on a locked gate ends once the gate
	// unlocks: not a fault, a dependency engine should restart the flag.
	ErrUnlocked = errors.New("gate: unlocked, restart to see the new value")

	// ErrFailed is in the chain of every failed gate's error (a
	// *FailedError), beside the cause given to Fail: the gate will never
	// unlock. Match it with errors.Is; name the gate with errors.As.
	ErrFailed = errors.New("gate: failed")

	// ErrDuplicateName is the cause of the failed entry a Board puts in
	// place of a second entry under a name it has already (Add, Follow).
	ErrDuplicateName = errors.New("gate: duplicate entry name")
)

// Causes of failures the package makes itself; callers match ErrFailed.
var (
	// errNoParts fails AnyOf with no parts, which can never unlock.
	errNoParts = errors.New("no parts, so it can never unlock")

	// errFailedChannel fails a Follow entry whose component closed its
	// Failed channel without giving a Cause (as Channels never does).
	errFailedChannel = errors.New("its failed channel is closed")

	// errNoCause fails a gate given Fail(nil), and an added Waiter whose
	// Done closed with no Err.
	errNoCause = errors.New("no cause given")
)

// FailedError is the error of a gate that failed, as Err, Wait, a Flag and
// a Board's entries return it: it names the gate and carries the cause. It
// matches ErrFailed and, through Unwrap, the cause (errors.Is).
type FailedError struct {
	Name string // the failed gate's name
	Err  error  // the cause given to Fail ("no cause given" for Fail(nil))
}

// Error names the gate, quoted and cut at 256 bytes, and gives the cause's
// text as it is.
func (e *FailedError) Error() string {
	return fmt.Sprintf("gate %q failed: %v", printable.Name(e.Name), e.Err)
}

// Unwrap returns the cause.
func (e *FailedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }
