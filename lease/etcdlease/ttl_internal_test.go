package etcdlease

import (
	"math"
	"testing"
	"time"
)

func TestTTLRoundsUpToWholeSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2},
		{60 * time.Second, 60},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
	} {
		if got := ttlFor(c.d); got != c.want {
			t.Errorf("ttlFor(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
