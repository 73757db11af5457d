package lease

import "time"

// Causes the tracker puts in a RenewalFailedError, for tests to match.
var (
	ErrLateTimerForTest = errLateTimer
	ErrShortTermForTest = errShortTerm
	ErrRanOutForTest    = errRanOut
)

// NewTrackerWithHooks is NewTracker with test seams: idle is called each
// time the renewer has armed its wait timer, with the delay; checkWait each
// time a Check begins waiting for a store call. Either may be nil.
func NewTrackerWithHooks(cfg Config, idle func(time.Duration), checkWait func()) (*Tracker, error) {
	return newTracker(cfg, hooks{idle: idle, checkWait: checkWait})
}

// Settled reports whether the renewer is asleep until after now with no
// check waiting for it: nothing will happen until the clock moves.
func Settled(t *Tracker, now time.Time) bool {
	wake := t.sleeping.Load()
	return wake != 0 && wake > now.UnixNano() && !t.hasPending()
}

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
