package gate

// HoldBoard locks b's mutex until release is called, so that a test can
// stop a resolving goroutine inside the board's hook.
func HoldBoard(b *Board) (release func()) {
	b.mu.Lock()
	return b.mu.Unlock
}
