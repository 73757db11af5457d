package apiservertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// trackerConfig is the tracker these tests run: Duration 1 s, so the Lease
// says leaseDurationSeconds 2.
func trackerConfig(store leasestore.Store, name, holder string) lease.Config {
	return lease.Config{
		Store:    store,
		Name:     name,
		Holder:   holder,
		Duration: time.Second,
	}
}

// leaseDuration is what a Claim for 2×Duration records.
const leaseDuration = 2 * time.Second

// TestTwoTrackersOneLeader: two trackers (two processes' stores) on one
// Lease; one leads, the other names it. When the leader stops without
// releasing, the other takes over after the leader's promise ended, within
// leaseDurationSeconds + 2×Duration/10 (the retry cap and the claim
// interval) + a call of the leader's last renewal
// (asserted with a second of slack for a loaded machine); with
// ReleaseOnClose, within Duration/10 + a call.
func TestTwoTrackersOneLeader(t *testing.T) {
	for _, release := range []bool{false, true} {
		name := map[bool]string{false: "StopWithoutRelease", true: "ReleaseOnClose"}[release]
		t.Run(name, func(t *testing.T) {
			csA, csB := newClient(t, ""), newClient(t, "")
			ns := newNamespace(t, csA)
			cfgA := trackerConfig(newStore(t, csA, ns), "leader", "a")
			cfgA.ReleaseOnClose = release
			a, wa := newTracker(t, cfgA)
			held := wa.await(t, 0, 5*time.Second, "a Held", heldBy("a"))

			b, wb := newTracker(t, trackerConfig(newStore(t, csB, ns), "leader", "b"))
			st, err := b.Check(checkCtx(t), 0)
			var nl *lease.NotLeaderError
			require.ErrorAs(t, err, &nl, "b: %v", err)
			require.Equal(t, "a", nl.Holder)
			require.Equal(t, lease.NotHeld, st.State)

			stopped := time.Now()
			require.NoError(t, a.Close())
			promised := wa.lastUntil(0)
			mark := wb.mark()
			took := wb.await(t, mark, leaseDuration+3*time.Second, "b Held", heldBy("b"))
			t.Logf("b took over %v after a stopped (a's promise ended %v after it stopped)",
				took.at.Sub(stopped), promised.Sub(stopped))
			require.Greater(t, took.Token, held.Token, "tokens must increase with the new term")
			if release {
				require.Less(t, took.at.Sub(stopped), time.Second, "a released the Lease: b should take it at its next claim")
				return
			}
			require.False(t, took.at.Before(promised),
				"b led from %v, before a's promise ended at %v", took.at, promised)
			require.Less(t, took.at.Sub(stopped), leaseDuration+2*cfgA.Duration/10+time.Second)
		})
	}
}

// TestRestartedHolderGetsNewToken: a process that restarts under the same
// holder name waits for its old term (it cannot tell it is its own), then
// gets a larger token.
func TestRestartedHolderGetsNewToken(t *testing.T) {
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	first, w1 := newTracker(t, trackerConfig(newStore(t, cs, ns), "leader", "unit-0"))
	old := w1.await(t, 0, 5*time.Second, "first term", heldBy("unit-0"))
	require.NoError(t, first.Close())

	_, w2 := newTracker(t, trackerConfig(newStore(t, newClient(t, ""), ns), "leader", "unit-0"))
	fresh := w2.await(t, 0, leaseDuration+3*time.Second, "second term", heldBy("unit-0"))
	require.Greater(t, fresh.Token, old.Token)
	require.False(t, fresh.at.Before(w1.lastUntil(0)), "the restarted holder led before its old term's promise ended")
}
