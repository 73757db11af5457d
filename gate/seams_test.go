package gate_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"

	"github.com/coldstart-go/coldstart/gate"
)

// component is a Component kept outside the board, as an upgrade gate is:
// it says what it is doing, and why it failed, in its own words.
type component struct {
	completed, failed chan struct{}
	mu                sync.Mutex
	detail            string
	cause             error
}

func newComponent(detail string) *component {
	return &component{completed: make(chan struct{}), failed: make(chan struct{}), detail: detail}
}

func (c *component) Completed() <-chan struct{} { return c.completed }
func (c *component) Failed() <-chan struct{}    { return c.failed }

func (c *component) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

func (c *component) Detail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detail
}

func (c *component) set(detail string) {
	c.mu.Lock()
	c.detail = detail
	c.mu.Unlock()
}

func (c *component) fail(cause error) {
	c.mu.Lock()
	c.cause, c.detail = cause, "failed"
	c.mu.Unlock()
	close(c.failed)
}

// The incident: the board said "[-]upgrade failed: its failed channel is
// closed" and never the phase, so the user copied the upgrade's state into
// a gate by hand. A followed component's words reach every answer.
func TestBoardFollowShowsCauseAndDetail(t *testing.T) {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	add(b, "api-port").Unlock()
	c := newComponent("checking whether new agent binaries are needed")
	entry := b.Follow("upgrade", c)
	clk.Advance(time.Second)
	c.set("running upgrade steps")
	clk.Advance(2 * time.Second)

	assert.Equal(t, "waiting on upgrade (3s: running upgrade steps); 1 open", b.Report().String())
	assert.Equal(t, "running upgrade steps", b.Report()[1].Detail)

	diskFull := errors.New("disk full")
	c.fail(fmt.Errorf("upgrade steps: %w", diskFull))
	<-entry.Done()
	r := b.Report()
	assert.ErrorIs(t, r[1].Err, diskFull, "the component's cause, not a copy of its text")
	assert.ErrorIs(t, entry.Err(), diskFull)
	assert.Empty(t, r[1].Detail, "a resolved entry has no detail")
	assert.Equal(t, gate.StateFailed, r[1].State)
	assert.Equal(t, "failed: upgrade (3s: upgrade steps: disk full); 1 open", r.String())
}

func TestBoardFollowCompletes(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := newComponent("running upgrade steps")
	stable := gate.AllOf("stable", b.Follow("upgrade", c))
	put(b, stable)
	close(c.completed)
	<-stable.Unlocked()
	assert.Equal(t, []string{"upgrade", "stable"}, b.Report().Opened())
}

// A component that failed without saying why still fails its entry, and
// says so.
func TestBoardFollowWithoutCause(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := newComponent("")
	close(c.failed)
	l := b.Follow("upgrade", c)
	assert.ErrorContains(t, l.Err(), "its failed channel is closed")
}

func TestBoardFollowNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, `gate.Board.Follow("x"): nil Component`, func() { gate.NewBoard(gate.BoardConfig{}).Follow("x", nil) })
	c := &component{}
	assert.PanicsWithValue(t, `gate.Board.Follow("y"): nil Completed and Failed channels`, func() { gate.NewBoard(gate.BoardConfig{}).Follow("y", c) })
}

// detailWaiter is a foreign Waiter that says what it waits for.
type detailWaiter struct{ chanWaiter }

func (detailWaiter) Detail() string { return "no peer admitted us yet" }

func TestBoardAddShowsAWaitersDetail(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	b.Add("self-dial", detailWaiter{make(chanWaiter)})
	assert.Equal(t, "no peer admitted us yet", b.Report()[0].Detail)
}

// A Detail method may read the board it is on: the board asks it after
// releasing its lock.
func TestBoardDetailMayReadTheBoard(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	c := &boardReader{component: newComponent(""), b: b}
	b.Follow("upgrade", c)
	defer close(c.completed) // ends Follow's goroutine
	assert.Equal(t, "1 entries", b.Report()[0].Detail)
}

type boardReader struct {
	*component
	b      *gate.Board
	nested bool // set while Detail reads the board, whose report asks Detail again
}

func (r *boardReader) Detail() string {
	if r.nested {
		return ""
	}
	r.nested = true
	defer func() { r.nested = false }()
	return fmt.Sprintf("%d entries", len(r.b.Report()))
}

// A custom engine's filter must tell "this gate failed" from a worker's own
// error, and name the gate, without knowing the cause.
func TestFailedErrorNamesTheGateForAFilter(t *testing.T) {
	l := gate.New("upgrade-steps")
	l.Fail(errors.New("step 3: schema migration failed"))
	filter := func(err error) string {
		var fe *gate.FailedError
		if errors.Is(err, gate.ErrFailed) && errors.As(err, &fe) {
			return "blocked on " + fe.Name
		}
		return "fault"
	}
	assert.Equal(t, "blocked on upgrade-steps", filter(fmt.Errorf("api-server: %w", gate.Wait(bounded(t), l))))
	assert.Equal(t, "blocked on upgrade-steps", filter(gate.NewFlag(l).Wait()))
	assert.Equal(t, "fault", filter(errors.New("api-server: bind: address in use")))
	fe := &gate.FailedError{Name: "lease", Err: errors.New("no quorum")}
	assert.ErrorIs(t, fe, gate.ErrFailed)
	assert.EqualError(t, errors.Unwrap(fe), "no quorum")
}

// A zero Lock panicked with a bare "close of nil channel"; now it is a
// locked gate with no name, as a zero sync.Mutex is an unlocked mutex.
func TestZeroLockIsUsable(t *testing.T) {
	t.Run("unlock", func(t *testing.T) {
		var l gate.Lock
		assert.False(t, l.IsUnlocked())
		assert.False(t, isClosed(l.Unlocked()))
		errc := make(chan error)
		go func() { errc <- gate.Wait(bounded(t), &l) }()
		l.Unlock()
		assert.NoError(t, recv(t, errc))
		assert.True(t, isClosed(l.Unlocked()))
		assert.True(t, isClosed(l.Done()))
	})
	t.Run("fail", func(t *testing.T) {
		var l gate.Lock
		l.Fail(errors.New("boom"))
		assert.True(t, isClosed(l.Done()))
		assert.EqualError(t, gate.Wait(bounded(t), &l), `gate "" failed: boom`)
	})
	t.Run("in a struct, on a board and in a composite", func(t *testing.T) {
		var agent struct{ ready gate.Lock }
		b := gate.NewBoard(gate.BoardConfig{})
		put(b, &agent.ready)
		all := gate.AllOf("all", &agent.ready)
		agent.ready.Unlock()
		assert.True(t, all.IsUnlocked())
		assert.Equal(t, gate.StateUnlocked, b.Report()[0].State)
	})
}
