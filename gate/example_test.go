package gate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/gate"
)

func ExampleNew() {
	serverUp := gate.New("api-server")
	go func() {
		// ... bind the port, start serving ...
		serverUp.Unlock()
	}()

	// The API client waits for its own server instead of dialling a peer.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Wait(ctx, serverUp); err != nil {
		fmt.Println("server never came up:", err)
		return
	}
	fmt.Println(serverUp)
	// Output: api-server (unlocked)
}

func ExampleAllOf() {
	ctrlPort := gate.New("controller-port")
	steps := gate.New("upgrade-steps")
	stable := gate.AllOf("stable", ctrlPort, steps)

	ctrlPort.Unlock()
	fmt.Println(stable.IsUnlocked())
	steps.Fail(errors.New("step 3: schema migration failed"))
	fmt.Println(gate.Wait(context.Background(), stable))
	// Output:
	// false
	// gate "stable" failed: gate "upgrade-steps" failed: step 3: schema migration failed
}

func ExampleBoard() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	ctrlPort := gate.New("controller-port")
	board.Add("controller-port", ctrlPort)
	board.Add("upgrade-steps", gate.New("upgrade-steps"))
	board.Add("lease", gate.New("lease"))

	clk.Advance(1500 * time.Millisecond)
	ctrlPort.Unlock()
	clk.Advance(10 * time.Second)

	// A stalled startup says what it waits on, e.g. in a log line.
	fmt.Println(board.Report())
	// Output: waiting on upgrade-steps (11.5s), lease (11.5s); 1 open
}

func ExampleFlag() {
	upgraded := gate.New("upgrade-steps-done")

	// An engine starts the flag; dependents run only while Check is true.
	flag := gate.NewFlag(upgraded)
	fmt.Println("check:", flag.Check())

	upgraded.Unlock()
	// The flag ends, so the engine restarts it (and its dependents)...
	fmt.Println("flag ended:", flag.Wait())
	// ...and the new flag reports the new value.
	fmt.Println("check:", gate.NewFlag(upgraded).Check())
	// Output:
	// check: false
	// flag ended: gate: unlocked, restart to see the new value
	// check: true
}

func ExampleOutput() {
	lock := gate.New("api-port-open")

	// In a manifold's Output func: hand the lock out as whichever
	// interface the dependent asked for.
	var w gate.Waiter
	var u gate.Unlocker
	if err := gate.Output(lock, &w); err != nil {
		fmt.Println(err)
	}
	if err := gate.Output(lock, &u); err != nil {
		fmt.Println(err)
	}
	u.Unlock()
	fmt.Println(w.IsUnlocked())

	var wrong string
	fmt.Println(gate.Output(lock, &wrong) != nil)
	// Output:
	// true
	// true
}

// migration is a component kept outside package gate (as an upgrade.Gate
// is): channels for its outcome, and what it says about itself.
type migration struct {
	done, failed chan struct{}
	cause        error
}

func (m *migration) Completed() <-chan struct{} { return m.done }
func (m *migration) Failed() <-chan struct{}    { return m.failed }
func (m *migration) Cause() error               { return m.cause }
func (m *migration) Detail() string             { return "migrating schema 41 to 42" }

// A component on the board speaks in its own words: its detail while the
// entry is locked, its cause once it failed. (An *upgrade.Gate is such a
// component: board.Follow("upgrade", g); so are a *listener.Listener's API
// port and a *lease.Tracker.) Close ends the board's following.
func ExampleBoard_Follow() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	defer board.Close()
	m := &migration{done: make(chan struct{}), failed: make(chan struct{})}
	entry := board.Follow("schema", m)

	clk.Advance(3 * time.Second)
	fmt.Println(board.Report())
	m.cause = errors.New("table agents: disk full")
	close(m.failed)
	<-entry.Done()
	fmt.Println(board.Report())
	var failed *gate.FailedError
	fmt.Println(errors.As(entry.Err(), &failed), failed.Name, errors.Is(entry.Err(), gate.ErrFailed))
	// Output:
	// waiting on schema (3s: migrating schema 41 to 42); 0 open
	// failed: schema (3s: table agents: disk full); 0 open
	// true schema true
}

// A bare pair of channels is a Component too.
func ExampleChannels() {
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	migrated, migrationFailed := make(chan struct{}), make(chan struct{})
	entry := board.Follow("migrations", gate.Channels(migrated, migrationFailed))
	close(migrationFailed)
	fmt.Println(gate.Wait(context.Background(), entry))
	// Output: gate "migrations" failed: its failed channel is closed
}

func ExampleBoard_Draining() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	stop := make(chan struct{}) // closed on SIGTERM: signal.NotifyContext's Done()
	board := gate.NewBoard(gate.BoardConfig{Clock: clk, Drain: stop})
	defer board.Close()
	serving := gate.New("serving")
	board.Add("serving", serving)
	clk.Advance(2 * time.Second)
	serving.Unlock()
	clk.Advance(time.Minute)

	close(stop)
	<-board.Draining() // readiness is false by now: refuse new calls, say NOT_SERVING
	grace, calls, lease := gate.New("grace over"), gate.New("calls finished"), gate.New("lease handed over")
	board.Add("grace over", grace)
	board.Add("calls finished", calls.After(grace))
	board.Add("lease handed over", lease.After(calls))
	clk.Advance(5 * time.Second)
	grace.Unlock()
	fmt.Println(board.Report())
	clk.Advance(300 * time.Millisecond)
	calls.Unlock()
	clk.Advance(10 * time.Millisecond)
	lease.Unlock()

	fmt.Print(board.Timeline().CriticalChain("lease handed over"))
	// Output:
	// waiting on draining (5s), calls finished (5s), lease handed over (5s); 2 open
	// lease handed over @1m7.31s +10ms
	// └─calls finished @1m7.3s +300ms
	//   └─grace over @1m7s +5s
}
