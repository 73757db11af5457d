package lease

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// On Linux, CLOCK_BOOTTIME − CLOCK_MONOTONIC is the time slept since boot.
func init() {
	if s, ok := bootSlept(); ok {
		b := newBootClock()
		b.last.Store(&bootReading{slept: s})
		hostClocks = b
	}
}

// bootClock reads the kernel's clocks only when the wall and monotonic
// readings of now have moved apart (DESIGN.md, "A stopped clock").
type bootClock struct {
	skewClock
	last atomic.Pointer[bootReading]
}

func newBootClock() *bootClock { return &bootClock{skewClock: newSkewClock()} }

// bootReading is the time slept as of a moment whose wall clock was skew
// ahead of its monotonic clock (both counted from epoch).
type bootReading struct {
	skew  time.Duration
	slept time.Duration
}

func (b *bootClock) read(now time.Time) clockReading {
	r := b.last.Load()
	skew := b.skew(now)
	if d := skew - r.skew; d > -suspendTolerance && d < suspendTolerance {
		return clockReading{slept: r.slept, skew: skew}
	}
	s, ok := bootSlept()
	if !ok {
		return clockReading{slept: r.slept, skew: skew}
	}
	b.last.Store(&bootReading{skew: skew, slept: s})
	return clockReading{slept: s, skew: skew}
}

// bootSlept reads CLOCK_BOOTTIME − CLOCK_MONOTONIC, again if the thread
// was descheduled between the readings.
func bootSlept() (time.Duration, bool) {
	const clockMonotonic, clockBoottime = 1, 7
	for range 5 {
		m1, ok1 := clockGettime(clockMonotonic)
		bt, ok2 := clockGettime(clockBoottime)
		m2, ok3 := clockGettime(clockMonotonic)
		if !ok1 || !ok2 || !ok3 {
			return 0, false
		}
		if m2-m1 < suspendTolerance/10 {
			return bt - (m1 + (m2-m1)/2), true
		}
	}
	return 0, false
}

func clockGettime(id uintptr) (time.Duration, bool) {
	var ts syscall.Timespec
	// clock_gettime does not block: RawSyscall spares the scheduler.
	_, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano()), errno == 0
}
