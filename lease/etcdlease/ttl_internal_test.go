package etcdlease

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// A keep-alive is confirmed only by a read answered in its own raft term.
func TestConfirmedInTerm(t *testing.T) {
	require.NoError(t, confirmedInTerm(7, 7))
	for _, c := range [][2]uint64{{7, 8}, {8, 7}, {0, 0}} {
		err := confirmedInTerm(c[0], c[1])
		require.ErrorIs(t, err, errTermChanged, "keep-alive in term %d, read in term %d", c[0], c[1])
	}
}
