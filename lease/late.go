package lease

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// A renewal timer that fires late says nothing about the promise: what
// delays it (CPU starvation, cgroup throttling, the GC, a stop signal)
// leaves the monotonic clock running, so now < Until stays exact, and what
// stops that clock stops the timer's too (suspend.go). So a late renewal
// goes at once, is counted, and is explained where the process can know
// (DESIGN.md, "Late renewals").

// lateDivisor: a renewal is late when its timer fires more than
// Margin/lateDivisor after it was due; a cause explains it when it lasted
// at least half that (Margin/(2×lateDivisor)).
const lateDivisor = 4

// lateCause is why a renewal ran late, as far as the process can tell:
// the first of these that the readings taken across its wait show.
type lateCause int

const (
	lateUnexplained lateCause = iota // none of the others showed
	lateSuspend                      // the host was suspended
	lateClockStep                    // the wall clock stepped against the monotonic one
	lateThrottled                    // the cgroup throttled the process's CPU
	lateGC                           // a stop-the-world GC pause
	lateScheduler                    // a goroutine waited to run (every P busy)
	lateCauses                       // the number of causes
)

// String is the cause as a log record says it.
func (c lateCause) String() string {
	return [...]string{"unexplained", "suspend", "clock-step", "throttled", "gc-pause", "scheduler"}[c]
}

// loadReading is what can delay a renewal, each figure a total whose
// growth across a wait is the evidence.
type loadReading struct {
	throttled    uint64        // the cgroup's periods throttled (cpu.stat nr_throttled)
	throttledFor time.Duration // its time throttled (cpu.stat throttled_usec)
	gcPauses     uint64        // GC pauses of at least the bound read for
	schedDelays  uint64        // goroutines that waited at least that bound to run
}

// loadMeter reads the process's load, counting pauses and delays of at
// least over. The renewer reads it at most twice a renewal.
type loadMeter interface {
	read(over time.Duration) loadReading
}

// lateWait is what the renewer read as it began to wait for a renewal.
type lateWait struct {
	due    time.Time // when the renewal is due at the latest; zero: no renewal
	clocks clockReading
	load   loadReading
}

// beginWait takes the readings a late renewal is explained against, if the
// renewer now waits for a scheduled renewal of a held lease.
func (t *Tracker) beginWait(now time.Time) lateWait {
	if t.renewer.due.IsZero() || t.snap.Load().status.State != Held {
		return lateWait{}
	}
	return lateWait{due: t.renewer.due, clocks: t.readClocks(now), load: t.load.read(t.lateBound() / 2)}
}

// lateBound is how late a renewal may be before it counts: Margin/4.
func (t *Tracker) lateBound() time.Duration { return t.cfg.Margin / lateDivisor }

// renewalSent counts a renewal that the renewer sends, at now, at the end
// of the wait w, more than lateBound after it was due, with its cause, and
// logs the first of an episode; one on time ends the episode. Lateness
// counts from the un-jittered time (a renewal jittered early and then
// delayed is late only past the time it was due at the latest) to the
// send, so that it includes a stall after the wake (the renewer held by
// the GC, or waiting for a P).
func (t *Tracker) renewalSent(w lateWait, now time.Time) {
	if w.due.IsZero() {
		return // no renewal awaited
	}
	// How late it went is part of the renew latency (renewalIn).
	late := now.Sub(w.due)
	t.renewer.sentLate = max(late, 0)
	if late <= t.lateBound() {
		// On time, or woken early (a check asked): the episode is over.
		t.renewer.lateEpisode = false
		return
	}
	cause := lateCauseOf(w.clocks, t.readClocks(now), w.load, t.load.read(t.lateBound()/2))
	t.counters.late[cause].Add(1)
	if !t.renewer.lateEpisode {
		t.renewer.lateEpisode = true
		t.logLate(late, cause)
	}
}

// lateCauseOf is the first cause the readings before and after a wait show.
func lateCauseOf(c0, c1 clockReading, l0, l1 loadReading) lateCause {
	step := c1.skew - c0.skew
	switch {
	case c1.slept-c0.slept >= suspendTolerance:
		return lateSuspend
	case step >= suspendTolerance || step <= -suspendTolerance:
		return lateClockStep
	case l1.throttled > l0.throttled || l1.throttledFor > l0.throttledFor:
		return lateThrottled
	case l1.gcPauses > l0.gcPauses:
		return lateGC
	case l1.schedDelays > l0.schedDelays:
		return lateScheduler
	}
	return lateUnexplained
}

// hostLoad is the process's loadMeter: its cgroup's cpu.stat (cgroup v2;
// none where the file is absent) and the runtime's histograms.
type hostLoad struct{}

func (hostLoad) read(over time.Duration) loadReading {
	r := runtimeLoad(over)
	if path := cgroupCPUStat(); path != "" {
		if b, err := os.ReadFile(path); err == nil {
			r.throttled, r.throttledFor = parseCPUStat(b)
		}
	}
	return r
}

// runtimeSamples are the runtime's histograms of stop-the-world GC pauses
// (the same as the deprecated /gc/pauses:seconds) and of the time
// runnable goroutines waited to run (sampled by the runtime), read under
// the mutex into memory reused from one read to the next.
var runtimeSamples = struct {
	sync.Mutex
	s []metrics.Sample
}{s: []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}, {Name: "/sched/latencies:seconds"}}}

func runtimeLoad(over time.Duration) loadReading {
	rs := &runtimeSamples
	rs.Lock()
	defer rs.Unlock()
	metrics.Read(rs.s)
	return loadReading{gcPauses: countOver(rs.s[0].Value, over), schedDelays: countOver(rs.s[1].Value, over)}
}

// countOver is how many of histogram v's samples were at least over.
func countOver(v metrics.Value, over time.Duration) uint64 {
	if v.Kind() != metrics.KindFloat64Histogram {
		return 0 // not in this runtime
	}
	h := v.Float64Histogram()
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= over.Seconds() {
			n += c
		}
	}
	return n
}

// cgroupCPUStat is the cpu.stat file of this process's cgroup v2, found
// once: "" where there is none (no /proc, cgroup v1 only).
var cgroupCPUStat = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	path, ok := parseCgroupPath(b)
	if !ok {
		return ""
	}
	file := filepath.Join("/sys/fs/cgroup", path, "cpu.stat")
	if _, err := os.Stat(file); err != nil {
		return ""
	}
	return file
})

// parseCgroupPath finds the cgroup v2 path ("0::/a/b") in the contents of
// /proc/self/cgroup.
func parseCgroupPath(b []byte) (string, bool) {
	for line := range bytes.Lines(b) {
		if path, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("0::")); ok && bytes.HasPrefix(path, []byte("/")) {
			return filepath.Clean(string(path)), true
		}
	}
	return "", false
}

// parseCPUStat reads nr_throttled and throttled_usec from a cgroup v2
// cpu.stat file; a line missing or unreadable reads 0 (the cpu controller
// is not enabled for the cgroup).
func parseCPUStat(b []byte) (throttled uint64, throttledFor time.Duration) {
	for line := range bytes.Lines(b) {
		key, value, ok := bytes.Cut(bytes.TrimRight(line, "\n"), []byte(" "))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(value), 10, 64)
		if err != nil {
			continue
		}
		switch string(key) {
		case "nr_throttled":
			throttled = n
		case "throttled_usec":
			throttledFor = time.Duration(min(n, uint64(1<<63-1)/uint64(time.Microsecond))) * time.Microsecond
		}
	}
	return throttled, throttledFor
}
