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
func TestConfirmedInRaftTerm(t *testing.T) {
	require.NoError(t, confirmedInRaftTerm(7, 7))
	for _, c := range [][2]uint64{{7, 8}, {8, 7}, {0, 0}} {
		err := confirmedInRaftTerm(c[0], c[1])
		require.ErrorIs(t, err, errRaftTermChanged, "keep-alive in raft term %d, read in raft term %d", c[0], c[1])
	}
}

// An etcd lease is resumed only by a keep-alive confirmed in the raft term
// it was last confirmed in, sent less than its TTL (less a tenth) after
// that: otherwise some deposed leader may have a revoke of it in flight.
func TestLeaseResumableOnlyInItsRaftTermWithinItsTTL(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := leaseLife{raftTerm: 7, confirmed: t0, ttl: 10 * time.Second}
	for _, c := range []struct {
		name     string
		raftTerm uint64
		sent     time.Time
		want     bool
	}{
		{"same raft term, a third of the TTL on", 7, t0.Add(10 * time.Second / 3), true},
		{"same raft term, just inside nine tenths", 7, t0.Add(9*time.Second - time.Nanosecond), true},
		{"same raft term, nine tenths of the TTL on", 7, t0.Add(9 * time.Second), false},
		{"same raft term, past the TTL", 7, t0.Add(11 * time.Second), false},
		{"a later raft term, at once", 8, t0.Add(time.Millisecond), false},
		{"an earlier raft term", 6, t0.Add(time.Millisecond), false},
		{"no raft term (a header without one)", 0, t0.Add(time.Millisecond), false},
	} {
		require.Equal(t, c.want, l.resumable(c.raftTerm, c.sent), c.name)
	}
}
