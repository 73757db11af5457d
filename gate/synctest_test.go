package gate_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/logtest"
)

// These tests run boards inside a testing/synctest bubble with their
// default clock (a nil BoardConfig.Clock is clock.WallClock, whose
// time.Now and timers are the bubble's fake time there): time moves only
// when every goroutine of the bubble waits, so every duration a board
// reports is exact, and a startup of seconds runs in microseconds.

// waited returns the "waited" attribute of each record with message msg,
// by gate.
func waited(logs *logtest.Handler, msg string) map[string]time.Duration {
	out := make(map[string]time.Duration)
	for _, r := range logs.Matching(msg) {
		out[r.Str("gate")] = r.Attrs["waited"].Duration()
	}
	return out
}

// A startup in fake time: the controller port opens at 2s, the upgrade
// (a followed component) says what it does and completes at 5s, stable
// opens with it and the API port 100ms later. The board's Report,
// Timeline, critical chain and records say exactly that.
func TestSyncTestBoardTimesAreExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := logtest.New()
		start := time.Now()
		b := gate.NewBoard(gate.BoardConfig{Name: "c0", Logger: logs.Logger()})
		port := add(b, "controller-port")
		up := newComponent("checking whether new agent binaries are needed")
		upgraded := b.Follow("upgrade", up)
		stable := gate.AllOf("stable", port, upgraded)
		b.Add("stable", stable)
		api := gate.New("api-port").After(stable)
		b.Add("api-port", api)

		go func() {
			time.Sleep(2 * time.Second)
			port.Unlock()
		}()
		go func() {
			time.Sleep(time.Second)
			up.set("running upgrade steps")
			time.Sleep(4 * time.Second)
			close(up.completed)
		}()
		go func() {
			if gate.Wait(context.Background(), stable) == nil {
				time.Sleep(100 * time.Millisecond)
				api.Unlock()
			}
		}()

		time.Sleep(3 * time.Second)
		synctest.Wait() // whatever can run at 3s has run
		assert.Equal(t, "waiting on upgrade (3s: running upgrade steps), stable (3s), api-port (3s); 1 open",
			b.Report().String())

		require.NoError(t, gate.Wait(context.Background(), api))
		assert.Equal(t, 5100*time.Millisecond, time.Since(start))
		r := b.Report()
		require.Len(t, r, 4)
		for i, want := range []struct {
			name  string
			took  time.Duration
			order int
		}{
			{"controller-port", 2 * time.Second, 1},
			{"upgrade", 5 * time.Second, 2},
			{"stable", 5 * time.Second, 3},
			{"api-port", 5100 * time.Millisecond, 4},
		} {
			assert.Equal(t, gate.Entry{Name: want.name, State: gate.StateUnlocked, Since: start, For: want.took, Order: want.order},
				r[i], "entry %d", i)
		}

		time.Sleep(time.Second) // the timeline ends now; what opened stays put
		tl := b.Timeline()
		assert.Equal(t, start, tl.Start)
		assert.Equal(t, 6100*time.Millisecond, tl.End)
		assert.Equal(t, "api-port @5.1s +100ms\n└─stable @5s\n  └─upgrade @5s +5s\n", tl.CriticalChain("").String())
		assert.Equal(t, map[string]time.Duration{
			"controller-port": 2 * time.Second, "upgrade": 5 * time.Second,
			"stable": 5 * time.Second, "api-port": 5100 * time.Millisecond,
		}, waited(logs, "gate opened"))

		require.NoError(t, b.Close())
		logs.Seal(t)
		time.Sleep(time.Hour)
		assert.Equal(t, 6100*time.Millisecond, b.Timeline().End, "a closed board ends when it was closed")
	})
}

// A failure in fake time: the lease fails after exactly 7s, and the board
// logs it at Warn with that wait, and shows it with its cause.
func TestSyncTestBoardFailureIsTimedExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := logtest.New()
		b := gate.NewBoard(gate.BoardConfig{Logger: logs.Logger()})
		defer b.Close()
		lease := newComponent("claiming")
		g := b.Follow("lease", lease)
		go func() {
			time.Sleep(7 * time.Second)
			lease.fail(errors.New("no quorum"))
		}()
		err := gate.Wait(context.Background(), g)
		require.ErrorIs(t, err, gate.ErrFailed)
		// Wait is released as the gate fails; the board's record is
		// written just after, on the goroutine that failed it.
		synctest.Wait()
		assert.Equal(t, "failed: lease (7s: no quorum); 0 open", b.Report().String())
		assert.Equal(t, "lease failed @7s +7s: no quorum\n", b.Timeline().CriticalChain("lease").String())
		recs := logs.Matching("gate failed")
		require.Len(t, recs, 1)
		assert.Equal(t, 7*time.Second, recs[0].Attrs["waited"].Duration())
	})
}

// Board.Close ends the goroutines of its Follow entries, including one
// whose component never resolves: the bubble's function returns with
// nothing left blocked (synctest.Test fails a test that leaves a goroutine
// of the bubble blocked; TestSyncTestBoardLeftOpenIsADeadlock shows it
// does, here). A component that resolves after Close is not recorded, and
// the board logs nothing, however long fake time runs on.
func TestSyncTestBoardCloseEndsItsFollowers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := logtest.New()
		b := gate.NewBoard(gate.BoardConfig{Logger: logs.Logger()})
		peer := newComponent("waiting for a peer") // never resolves
		b.Follow("peer", peer)
		late := newComponent("")
		lateGate := b.Follow("late", late)
		time.Sleep(time.Minute)
		require.NoError(t, b.Close())
		logs.Seal(t)

		close(late.completed)
		time.Sleep(time.Hour)
		synctest.Wait()
		assert.False(t, lateGate.IsUnlocked(), "no follower is left to see it")
		assert.Equal(t, "waiting on peer (1m0s), late (1m0s); 0 open", b.Report().String())
		assert.Empty(t, logs.Records())
	})
}

// childEnv asks this test binary, run again, to play the child's part.
const childEnv = "COLDSTART_SYNCTEST_CHILD"

// What TestSyncTestBoardCloseEndsItsFollowers relies on: a board left open
// keeps its Follow goroutine blocked, and synctest.Test fails the test as a
// deadlock naming it. Run in a child process, since that failure is a
// panic that leaves the bubble's goroutine behind.
func TestSyncTestBoardLeftOpenIsADeadlock(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		synctest.Test(t, func(t *testing.T) {
			b := gate.NewBoard(gate.BoardConfig{})
			b.Follow("peer", newComponent("waiting for a peer"))
			time.Sleep(time.Minute)
			// no b.Close()
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), "GOTRACEBACK=all")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the child passed:\n%s", out)
	assert.Contains(t, string(out), "deadlock: main bubble goroutine has exited but blocked goroutines remain")
	assert.Contains(t, string(out), "gate.(*Board).Follow.func")
}
