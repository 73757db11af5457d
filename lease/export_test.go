package lease

// Errors the tracker puts in a RenewalFailedError, for tests to match.
var (
	ErrLateTimerForTest = errLateTimer
	ErrShortTermForTest = errShortTerm
	ErrRanOutForTest    = errRanOut
)

// CheckPending reports whether a check has asked for a store call that the
// renewer has not started yet.
func CheckPending(t *Tracker) bool { return t.hasPending() }

// MemStoreWatches returns how many Lost watches m has open.
func MemStoreWatches(m *MemStore) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ws := range m.watches {
		n += len(ws)
	}
	return n
}
