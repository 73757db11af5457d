package dialer

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrLocalNotReady is matched (alongside ctx.Err()) by the error of a
	// Dial or Connect under RequireLocalWhenReady whose ctx ended while
	// LocalReady was still open, no peer having answered (or none listed).
	// Dial again later, or find out why the local server is not serving;
	// the error's Attempts say which peers failed and why.
	ErrLocalNotReady = errors.New("dialer: local controller not ready")
)

// DialError is returned by Dial and Connect when ctx ends before a
// connection is made. It names every address the call tried, each with its
// own last failure, and unwraps to the reason it stopped (ctx.Err()), so
// errors.Is(err, context.DeadlineExceeded) works. It matches
// ErrLocalNotReady when LocalNotReady is set.
type DialError struct {
	// Policy is the policy the call ran under.
	Policy Policy
	// Attempts lists every address the call tried, or skipped because a
	// server had asked for a pause (see RetryAfter on Connect), in the
	// order first tried.
	Attempts []Attempt
	// LocalNotReady reports that the call ran under RequireLocalWhenReady
	// and LocalReady had not closed when it gave up.
	LocalNotReady bool
	// Err is why the call stopped: ctx.Err().
	Err error
}

// Attempt is one address a Dial tried and how its last try failed.
type Attempt struct {
	Addr  string
	Local bool  // a loopback address of this machine's controller
	Tries int   // dials started; 0 if only skipped on a RetryAfter hint
	Err   error // the last failure
}

// Error names the policy, the reason, and every address with its failure.
func (e *DialError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dialer: dialing controller (%v): %v", e.Policy, e.Err)
	if e.LocalNotReady {
		b.WriteString("; local controller not ready")
	}
	if len(e.Attempts) == 0 {
		b.WriteString("; no address to dial")
		return b.String()
	}
	b.WriteString("; tried ")
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.Addr)
		if a.Tries == 0 {
			b.WriteString(" (not dialled)")
		} else if a.Tries > 1 {
			fmt.Fprintf(&b, " (%d times)", a.Tries)
		}
		fmt.Fprintf(&b, ": %v", a.Err)
	}
	return b.String()
}

// Unwrap returns the reason the call stopped (ctx.Err()).
func (e *DialError) Unwrap() error { return e.Err }

// Is reports whether target is ErrLocalNotReady and LocalNotReady is set.
func (e *DialError) Is(target error) bool {
	return target == ErrLocalNotReady && e.LocalNotReady
}
