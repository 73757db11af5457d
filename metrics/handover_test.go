package metrics_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/metrics"
)

// A follower that the lease is handed over to exports the leaderless gap
// it saw: coldstart_lease_handover_gap_seconds counts the hand-over and
// sums its gap, from the release its store's watch reported to its Held
// (in fake time: a testing/synctest bubble, MemStore on the default clock).
func TestTrackerCollectorExportsHandOverGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := leasestore.NewMemStore(leasestore.MemStoreConfig{})
		start := func(holder string) *lease.Tracker {
			tr, err := lease.NewTracker(lease.Config{Store: mem, Name: "singular-controller", Holder: holder,
				Duration: 2 * time.Second, ReleaseOnClose: true})
			require.NoError(t, err)
			return tr
		}
		await := func(tr *lease.Tracker, s lease.State) {
			for {
				st, changed := tr.Current()
				if st.State == s {
					return
				}
				<-changed
			}
		}
		c0 := start("c0")
		await(c0, lease.Held)
		c1 := start("c1")
		defer c1.Close()
		await(c1, lease.NotHeld)
		time.Sleep(5 * time.Second)
		released := time.Now()
		require.NoError(t, c0.Close())
		await(c1, lease.Held)
		gap := time.Since(released)

		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(metrics.NewTrackerCollector(c1)))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var found bool
		for _, mf := range mfs {
			if mf.GetName() != "coldstart_lease_handover_gap_seconds" {
				continue
			}
			found = true
			require.Len(t, mf.GetMetric(), 1)
			s := mf.GetMetric()[0].GetSummary()
			assert.Equal(t, uint64(1), s.GetSampleCount(), "one hand-over")
			assert.Equal(t, gap.Seconds(), s.GetSampleSum(), "its gap, from the release to Held")
			assert.LessOrEqual(t, gap, 5*time.Millisecond)
		}
		assert.True(t, found, "the family is exported")
	})
}
