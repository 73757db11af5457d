package gate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
)

var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

func TestBoardReportsWhatStartupWaitsOn(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	ctrl := add(b, "controller-port")
	steps := add(b, "upgrade-steps")
	clk.Advance(2 * time.Second)
	api := add(b, "api-port")
	mongo := add(b, "mongo")
	clk.Advance(time.Second)
	ctrl.Unlock()
	clk.Advance(4 * time.Second)
	mongo.Fail(errors.New("no quorum"))
	clk.Advance(time.Second)

	r := b.Report()
	require.Len(t, r, 4)
	assert.Equal(t, gate.Entry{Name: "controller-port", State: gate.StateUnlocked, Since: t0, For: 3 * time.Second, Order: 1}, r[0])
	assert.Equal(t, gate.Entry{Name: "upgrade-steps", State: gate.StateLocked, Since: t0, For: 8 * time.Second}, r[1])
	assert.Equal(t, gate.StateLocked, r[2].State)
	assert.Equal(t, 6*time.Second, r[2].For)
	assert.Equal(t, gate.StateFailed, r[3].State)
	assert.Equal(t, 2, r[3].Order)
	assert.Equal(t, 5*time.Second, r[3].For)
	assert.ErrorContains(t, r[3].Err, "no quorum")

	assert.Equal(t, "waiting on upgrade-steps (8s), api-port (6s); failed: mongo (5s: no quorum); 1 open", r.String())

	// What startup waits on: the locked entries, and board order is
	// longest-waiting first.
	pending := locked(r)
	require.Len(t, pending, 2)
	assert.Equal(t, "upgrade-steps", pending[0].Name, "longest wait first")
	assert.Equal(t, "api-port", pending[1].Name)
	assert.Greater(t, pending[0].For, pending[1].For)

	steps.Unlock()
	api.Unlock()
	assert.Equal(t, []string{"controller-port", "upgrade-steps", "api-port"}, b.Report().Opened())
	assert.Empty(t, locked(b.Report()))
}

func locked(r gate.Report) []gate.Entry {
	var l []gate.Entry
	for _, e := range r {
		if e.State == gate.StateLocked {
			l = append(l, e)
		}
	}
	return l
}

func TestBoardOrderIsUnlockOrderEvenAtTheSameInstant(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)}) // the clock never moves
	names := []string{"e", "d", "c", "b", "a"}
	locks := map[string]*gate.Lock{}
	for _, n := range names {
		locks[n] = add(b, n)
	}
	for _, n := range []string{"c", "a", "e", "b", "d"} {
		locks[n].Unlock()
	}
	assert.Equal(t, []string{"c", "a", "e", "b", "d"}, b.Report().Opened())
}

func TestBoardSeesForeignWaitersWhenReported(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	c := make(chanWaiter)
	b.Add("local-ready", c)
	b.Add("always", gate.AlreadyUnlocked)
	clk.Advance(time.Second)
	r := b.Report()
	assert.Equal(t, gate.StateLocked, r[0].State)
	assert.Equal(t, gate.StateUnlocked, r[1].State)
	close(c)
	clk.Advance(time.Second)
	r = b.Report()
	assert.Equal(t, gate.StateUnlocked, r[0].State)
	assert.Equal(t, 2*time.Second, r[0].For, "seen open at the report after it opened")
	clk.Advance(time.Second)
	assert.Equal(t, 2*time.Second, b.Report()[0].For, "fixed once seen")
}

func TestBoardAddsAlreadyResolvedGates(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	l := gate.New("early")
	l.Unlock()
	put(b, l)
	r := b.Report()
	assert.Equal(t, gate.StateUnlocked, r[0].State)
	assert.Equal(t, 1, r[0].Order)
	assert.Equal(t, "1 open", r.String())
}

func TestBoardAddNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, `gate.Board.Add("x"): nil Waiter`, func() { gate.NewBoard(gate.BoardConfig{}).Add("x", nil) })
	var nilLock *gate.Lock
	assert.PanicsWithValue(t, `gate.Board.Add("y"): nil Waiter`, func() { gate.NewBoard(gate.BoardConfig{}).Add("y", nilLock) })
}

// A report made while a gate's resolving goroutine is still running the
// hooks before the board's (here: another board's, held busy) must place
// the gate where it resolved, not where the report first saw it. Seen in
// hacontroller: "stable" reported after "api-port", which opened after it.
func TestBoardOrderWhenReportedBeforeItsHookRan(t *testing.T) {
	other, b := gate.NewBoard(gate.BoardConfig{}), gate.NewBoard(gate.BoardConfig{})
	stable, api := gate.New("stable"), gate.New("api-port")
	put(other, stable) // stable's first hook: blocks while other is held
	put(b, stable)
	put(b, api)

	release := gate.HoldBoard(other)
	resolved := make(chan struct{})
	go func() { defer close(resolved); stable.Unlock() }()
	<-stable.Unlocked() // stable is open; its resolver is stuck in other's hook
	api.Unlock()
	assert.Equal(t, []string{"stable", "api-port"}, b.Report().Opened())
	release()
	<-resolved
	assert.Equal(t, []string{"stable", "api-port"}, b.Report().Opened(), "and it stays so")
}

func TestBoardSeesForeignFailures(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	broken := brokenFailer{done: make(chan struct{})}
	b.Add("foreign", broken)
	assert.Equal(t, gate.StateLocked, b.Report()[0].State)
	close(broken.done)
	r := b.Report()
	assert.Equal(t, gate.StateFailed, r[0].State)
	assert.ErrorIs(t, r[0].Err, gate.ErrFailed)
	var fe *gate.FailedError
	require.ErrorAs(t, r[0].Err, &fe, "Entry.Err is a *FailedError, as documented")
	assert.Equal(t, "foreign", fe.Name)
	assert.Equal(t, `gate "foreign" failed: no cause given`, r[0].Err.Error())
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "locked", gate.StateLocked.String())
	assert.Equal(t, "unlocked", gate.StateUnlocked.String())
	assert.Equal(t, "failed", gate.StateFailed.String())
	assert.Equal(t, "State(9)", gate.State(9).String())
}

// A composite's hook on a part can run before a board's hook on the same
// part (hooks run in the order they were added), yet the board must record
// the part first: it opened first.
func TestBoardRecordsPartBeforeCompositeAddedEarlier(t *testing.T) {
	part := gate.New("self-dial")
	stable := gate.AllOf("stable", part) // hooks part before the board does
	b := gate.NewBoard(gate.BoardConfig{})
	put(b, stable)
	put(b, part)
	part.Unlock()
	assert.Equal(t, []string{"self-dial", "stable"}, b.Report().Opened())
}

func TestBoardFollowChannels(t *testing.T) {
	for _, tc := range []struct {
		name           string
		openedClosed   bool // before Follow
		failedClosed   bool // before Follow
		close          string
		state          gate.State
		reportContains string
	}{
		{name: "opened closes", close: "opened", state: gate.StateUnlocked, reportContains: "1 open"},
		{name: "failed closes", close: "failed", state: gate.StateFailed, reportContains: "failed: upgrade (1s: its failed channel is closed)"},
		{name: "opened already closed", openedClosed: true, state: gate.StateUnlocked},
		{name: "failed already closed", failedClosed: true, state: gate.StateFailed},
		{name: "both already closed: failed wins", openedClosed: true, failedClosed: true, state: gate.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.NewClock(t0)
			b := gate.NewBoard(gate.BoardConfig{Clock: clk})
			opened, failed := make(chan struct{}), make(chan struct{})
			if tc.openedClosed {
				close(opened)
			}
			if tc.failedClosed {
				close(failed)
			}
			l := b.Follow("upgrade", gate.Channels(opened, failed))
			if tc.close == "" {
				assert.True(t, isClosed(l.Done()), "resolved at once, with no goroutine")
			} else {
				assert.Equal(t, gate.StateLocked, b.Report()[0].State)
				clk.Advance(time.Second)
				if tc.close == "opened" {
					close(opened)
				} else {
					close(failed)
				}
				<-l.Done()
			}
			r := b.Report()
			assert.Equal(t, tc.state, r[0].State)
			assert.Contains(t, r.String(), tc.reportContains)
			if tc.state == gate.StateFailed {
				assert.ErrorContains(t, r[0].Err, `gate "upgrade" failed: its failed channel is closed`)
			}
		})
	}
}

func TestBoardFollowOrderIsCloseOrder(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	a, c := make(chan struct{}), make(chan struct{})
	wa := b.Follow("a", gate.Channels(a, nil))
	lock := add(b, "b")
	wc := b.Follow("c", gate.Channels(c, nil))
	close(c)
	<-wc.Done()
	lock.Unlock()
	close(a)
	<-wa.Done()
	assert.Equal(t, []string{"c", "b", "a"}, b.Report().Opened())
}

// A composite built on Follow's gate opens after it on the board, and fails
// with it: the order hacontroller's "stable" relies on, which a composite
// on the raw channel could not promise (the board records a Follow entry on
// the goroutine Follow starts, which may run after the composite opened).
func TestBoardCompositeOnFollowFollowsIt(t *testing.T) {
	for range 100 {
		b := gate.NewBoard(gate.BoardConfig{})
		completed := make(chan struct{})
		stable := gate.AllOf("stable", b.Follow("upgrade", gate.Channels(completed, nil)))
		put(b, stable)
		close(completed)
		<-stable.Unlocked()
		require.Equal(t, []string{"upgrade", "stable"}, b.Report().Opened())
	}
	failed := make(chan struct{})
	b := gate.NewBoard(gate.BoardConfig{})
	stable := gate.AllOf("stable", b.Follow("upgrade", gate.Channels(nil, failed)))
	close(failed)
	<-stable.Done()
	assert.ErrorContains(t, stable.Err(), "its failed channel is closed")
}

func TestBoardFollowChannelsNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, `gate.Board.Follow("x"): nil Completed and Failed channels`, func() { gate.NewBoard(gate.BoardConfig{}).Follow("x", gate.Channels(nil, nil)) })
}

// add puts a new gate named name on b.
func add(b *gate.Board, name string) *gate.Lock {
	l := gate.New(name)
	b.Add(name, l)
	return l
}

// put puts l on b under its own name.
func put(b *gate.Board, l *gate.Lock) { b.Add(l.Name(), l) }
