package lease

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseCPUStat(t *testing.T) {
	const stat = "usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 50\nnr_throttled 7\nthrottled_usec 123456\nnr_bursts 0\nburst_usec 0\n"
	n, d := parseCPUStat([]byte(stat))
	assert.Equal(t, uint64(7), n)
	assert.Equal(t, 123456*time.Microsecond, d)
	n, d = parseCPUStat([]byte("usage_usec 1000\nuser_usec 600\n")) // no cpu controller
	assert.Zero(t, n)
	assert.Zero(t, d)
}

func TestParseCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"0::/\n", "/", true},
		{"0::/system.slice/agent.service\n", "/system.slice/agent.service", true},
		{"12:cpu,cpuacct:/docker/abc\n0::/docker/abc\n", "/docker/abc", true},
		{"0::/a/../../etc\n", "/etc", true},         // cleaned: still under /sys/fs/cgroup once joined
		{"12:cpu,cpuacct:/docker/abc\n", "", false}, // cgroup v1 only
		{"", "", false},
	} {
		got, ok := parseCgroupPath([]byte(tc.in))
		assert.Equal(t, tc.ok, ok, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// TestHostLoadReadsTheRuntime: the runtime's histograms are there, and a
// GC's pauses are counted at a bound of zero.
func TestHostLoadReadsTheRuntime(t *testing.T) {
	before := hostLoad{}.read(0)
	runtime.GC()
	after := hostLoad{}.read(0)
	assert.Greater(t, after.gcPauses, before.gcPauses, "a GC pauses the world twice")
	assert.GreaterOrEqual(t, after.schedDelays, before.schedDelays)
	assert.Zero(t, hostLoad{}.read(time.Hour).gcPauses, "no pause of an hour")
}

// FuzzParseCPUStat: any cpu.stat contents parse without panicking, and a
// well-formed file's figures come back as written.
func FuzzParseCPUStat(f *testing.F) {
	f.Add([]byte("usage_usec 1000\nnr_periods 50\nnr_throttled 7\nthrottled_usec 123456\n"), uint64(3), uint64(99))
	f.Add([]byte("nr_throttled\nthrottled_usec -1\nthrottled_usec 18446744073709551615\n"), uint64(0), uint64(1<<63))
	f.Add([]byte{}, uint64(1), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, throttled, usec uint64) {
		parseCPUStat(b)
		parseCgroupPath(b)
		usec %= uint64(1<<63-1) / uint64(time.Microsecond)
		s := fmt.Sprintf("usage_usec 5\nnr_throttled %d\nthrottled_usec %d\n", throttled, usec)
		n, d := parseCPUStat([]byte(s))
		if n != throttled || d != time.Duration(usec)*time.Microsecond {
			t.Fatalf("%q: read %d, %v", s, n, d)
		}
		if path, ok := parseCgroupPath(b); ok && !strings.HasPrefix(path, "/") {
			t.Fatalf("%q: path %q is not absolute", b, path)
		}
	})
}
