package lease

import (
	"syscall"
	"time"
	"unsafe"
)

// bootSlept reads CLOCK_BOOTTIME − CLOCK_MONOTONIC, the time slept since
// boot, again if the thread was descheduled between the readings.
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
