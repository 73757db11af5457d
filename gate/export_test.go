package gate

// HoldBoard locks b's mutex until release is called, so that a test can
// stop a resolving goroutine inside the board's hook.
func HoldBoard(b *Board) (release func()) {
	b.mu.Lock()
	return b.mu.Unlock
}

// ErrFailed is in the chain of every failed gate's error.
var ErrFailed = errFailed

// FailedError is the type of a failed gate's error.
type FailedError = failedError
