package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
)

const ms = time.Millisecond

// controllerBoard is a controller's startup on a test clock, with known
// times (from the board's start):
//
//	metrics    added @0,     opened @300ms
//	serving    added @0,     opened @800ms
//	self-dial  added @0,     opened @1s     after serving
//	lease      added @0,     opened @1.5s
//	upgrade    added @100ms, opened @2s     after serving
//	stable     AllOf(serving, self-dial, upgrade, lease): opens with upgrade @2s
//	api-port   added @100ms, opened @2.1s   after stable
//	workers    added @100ms, opened @2.5s   after api-port
func controllerBoard(t *testing.T, cfg gate.BoardConfig) (*gate.Board, *testclock.Clock) {
	t.Helper()
	clk := testclock.NewClock(t0)
	cfg.Clock = clk
	b := gate.NewBoard(cfg)
	metrics := add(b, "metrics")
	serving := add(b, "serving")
	selfDial := add(b, "self-dial").After(serving)
	lease := add(b, "lease")
	clk.Advance(100 * ms)
	upgrade := add(b, "upgrade").After(serving)
	stable := gate.AllOf("stable", serving, selfDial, upgrade, lease)
	put(b, stable)
	api := add(b, "api-port").After(stable)
	workers := add(b, "workers").After(api)

	step := func(at time.Duration, l *gate.Lock) {
		clk.Advance(t0.Add(at).Sub(clk.Now()))
		l.Unlock()
	}
	step(300*ms, metrics)
	step(800*ms, serving)
	step(1000*ms, selfDial)
	step(1500*ms, lease)
	step(2000*ms, upgrade)
	require.True(t, stable.IsUnlocked())
	step(2100*ms, api)
	step(2500*ms, workers)
	clk.Advance(500 * ms) // taken @3s
	return b, clk
}

func TestTimelineCriticalChainOfAControllerStartup(t *testing.T) {
	b, _ := controllerBoard(t, gate.BoardConfig{})
	tl := b.Timeline()
	assert.Equal(t, t0, tl.Start)
	assert.Equal(t, 3*time.Second, tl.End)

	chain := tl.CriticalChain("") // the board's own: workers ended last among what nothing waits for
	type link struct {
		name      string
		at, took  time.Duration
		state     gate.State
		inputsLen int
	}
	var got []link
	for _, s := range chain {
		got = append(got, link{s.Name, s.Ended, s.Took, s.State, len(s.After)})
	}
	assert.Equal(t, []link{
		{"workers", 2500 * ms, 400 * ms, gate.StateUnlocked, 1},
		{"api-port", 2100 * ms, 100 * ms, gate.StateUnlocked, 1},
		{"stable", 2000 * ms, 0, gate.StateUnlocked, 4},
		{"upgrade", 2000 * ms, 1200 * ms, gate.StateUnlocked, 1},
		{"serving", 800 * ms, 800 * ms, gate.StateUnlocked, 0},
	}, got)
	assert.Equal(t, `workers @2.5s +400ms
└─api-port @2.1s +100ms
  └─stable @2s
    └─upgrade @2s +1.2s
      └─serving @800ms +800ms
`, chain.String())

	assert.Equal(t, chain, tl.CriticalChain("workers"))
	assert.Equal(t, "self-dial @1s +200ms\n└─serving @800ms +800ms\n", tl.CriticalChain("self-dial").String())
	assert.Equal(t, "metrics @300ms +300ms\n", tl.CriticalChain("metrics").String())
	assert.Nil(t, tl.CriticalChain("no-such-gate"))

	// Every entry, in board order, with what it waited for.
	names := func(idx []int) []string {
		var n []string
		for _, i := range idx {
			n = append(n, tl.Entries[i].Name)
		}
		return n
	}
	stable := tl.Entries[5]
	require.Equal(t, "stable", stable.Name)
	assert.Equal(t, []string{"serving", "self-dial", "upgrade", "lease"}, names(stable.After))
	assert.Equal(t, "upgrade", tl.Entries[stable.Critical].Name)
	assert.Equal(t, 100*ms, stable.Added)
	assert.Equal(t, 6, stable.Order, "metrics, serving, self-dial, lease, upgrade, then stable")
	assert.Equal(t, -1, tl.Entries[0].Critical, "metrics waited for nothing")
}

func TestTimelineCriticalInputOfAnyOfIsTheFirstToOpen(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	near, far := add(b, "near-peer"), add(b, "far-peer")
	put(b, gate.AnyOf("a-peer", near, far))
	clk.Advance(200 * ms)
	near.Unlock() // opens a-peer
	clk.Advance(time.Second)
	far.Unlock() // after a-peer: not what it waited for

	chain := b.Timeline().CriticalChain("a-peer")
	assert.Equal(t, "a-peer @200ms\n└─near-peer @200ms +200ms\n", chain.String())
}

func TestTimelineOrdersInputsThatOpenedAtTheSameInstant(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)}) // the clock never moves
	first, second := add(b, "first"), add(b, "second")
	put(b, gate.AllOf("both", first, second))
	second.Unlock()
	first.Unlock() // opened last, at the same instant: still the critical input
	assert.Equal(t, []string{"both", "first"}, chainNames(b.Timeline().CriticalChain("both")))
}

func TestTimelineFailedChainNamesTheFailure(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	port, lease := add(b, "controller-port"), add(b, "lease")
	put(b, gate.AllOf("stable", port, lease))
	clk.Advance(time.Second)
	port.Unlock()
	clk.Advance(2 * time.Second)
	lease.Fail(errors.New("no quorum"))

	tl := b.Timeline()
	chain := tl.CriticalChain("")
	assert.Equal(t, "stable failed @3s: gate \"lease\" failed: no quorum\n└─lease failed @3s +3s: no quorum\n", chain.String())
	require.Len(t, chain, 2)
	assert.Equal(t, gate.StateFailed, chain[0].State)
	assert.ErrorIs(t, chain[1].Err, gate.ErrFailed)
}

func TestTimelineOfAStalledStartupFollowsWhatIsStillLocked(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	port := add(b, "controller-port")
	steps := newComponent("running upgrade steps")
	upgrade := b.Follow("upgrade", steps)
	lease := add(b, "lease")
	stable := gate.AllOf("stable", port, upgrade, lease)
	put(b, stable)
	add(b, "api-port").After(stable)
	clk.Advance(time.Second)
	port.Unlock()
	clk.Advance(11 * time.Second)

	// api-port waits on stable, which waits on upgrade first of what is
	// locked: that is what startup waits on.
	assert.Equal(t, `api-port locked +12s
└─stable locked +12s
  └─upgrade locked +12s (running upgrade steps)
`, b.Timeline().CriticalChain("").String())

	// Once stable opens, api-port's wait counts from then: our own code is
	// what it now waits on.
	// upgrade opens on the board's goroutine, which records stable in its
	// hook after closing stable's channels: a gate following stable from
	// now on opens only once that hook has run.
	recorded := gate.AllOf("stable-recorded", stable)
	lease.Unlock()
	close(steps.completed)
	require.NoError(t, gate.Wait(context.Background(), recorded))
	clk.Advance(3 * time.Second)
	assert.Equal(t, `api-port locked +3s
└─stable @12s
  └─upgrade @12s +12s
`, b.Timeline().CriticalChain("").String())
}

func TestTimelineLooksThroughACompositeNotOnTheBoard(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	a, c := add(b, "a"), add(b, "c")
	inner := gate.AllOf("inner", a, c) // not on the board
	put(b, gate.AllOf("outer", inner, a))
	clk.Advance(time.Second)
	a.Unlock()
	clk.Advance(time.Second)
	c.Unlock()

	tl := b.Timeline()
	outer := tl.Entries[2]
	assert.Equal(t, []int{0, 1}, outer.After, "a and c, once each, in the order given")
	assert.Equal(t, "outer @2s\n└─c @2s +2s\n", tl.CriticalChain("outer").String())
}

func TestTimelineChainOfACycleEnds(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	x, y := add(b, "x"), add(b, "y")
	x.After(y)
	y.After(x) // a cycle that can never resolve: the chain must still end
	assert.Equal(t, []string{"y", "x"}, chainNames(b.Timeline().CriticalChain("")))
	assert.Equal(t, []string{"x", "y"}, chainNames(b.Timeline().CriticalChain("x")))
}

func TestTimelineOfAnEmptyBoard(t *testing.T) {
	tl := gate.NewBoard(gate.BoardConfig{}).Timeline()
	assert.Empty(t, tl.Entries)
	assert.Nil(t, tl.CriticalChain(""))
}

func TestLockAfterPanicsOnANilInput(t *testing.T) {
	assert.PanicsWithValue(t, `gate.Lock("api-port").After: input 1 is nil`, func() {
		gate.New("api-port").After(gate.New("stable"), nil)
	})
}

func chainNames(c gate.Chain) []string {
	var n []string
	for _, s := range c {
		n = append(n, s.Name)
	}
	return n
}
