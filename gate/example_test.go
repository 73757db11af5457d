package gate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
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
	ctrlPort := board.New("controller-port")
	board.New("upgrade-steps")
	board.New("lease")

	clk.Advance(1500 * time.Millisecond)
	ctrlPort.Unlock()
	clk.Advance(10 * time.Second)

	// A stalled startup says what it waits on, e.g. in a log line.
	fmt.Println(board.Report())
	// Output: waiting on upgrade-steps (11.5s), lease (11.5s); 1 open
}

// A board answers a readiness probe the Kubernetes /readyz way; a state
// kept outside this package (here an upgrade's pair of channels) goes on it
// with Watch, and composites are built on the gate Watch returns.
func ExampleBoard_Handler() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	serving := board.New("serving")
	completed, failed := make(chan struct{}), make(chan struct{})
	upgraded := board.Watch("upgrade", completed, failed)
	stable := gate.AllOf("stable", serving, upgraded)
	board.Add(stable)

	probe := func() {
		rec := httptest.NewRecorder()
		board.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
		fmt.Print(rec.Code, "\n", rec.Body)
	}
	serving.Unlock()
	clk.Advance(12 * time.Second)
	probe()
	close(completed)
	_ = gate.Wait(context.Background(), stable)
	probe()
	// Output:
	// 503
	// [+]serving ok
	// [-]upgrade locked for 12s
	// [-]stable locked for 12s
	// readyz check failed
	// 200
	// [+]serving ok
	// [+]upgrade ok
	// [+]stable ok
	// readyz check passed
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
	// flag ended: gate unlocked: restart to see the new value
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
// component: board.Follow("upgrade", g).)
func ExampleBoard_Follow() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	m := &migration{done: make(chan struct{}), failed: make(chan struct{})}
	entry := board.Follow("schema", m)

	probe := func() {
		rec := httptest.NewRecorder()
		board.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		fmt.Print(rec.Body)
	}
	clk.Advance(3 * time.Second)
	probe()
	m.cause = errors.New("table agents: disk full")
	close(m.failed)
	<-entry.Done()
	probe()
	var failed *gate.FailedError
	fmt.Println(errors.As(entry.Err(), &failed), failed.Name, errors.Is(entry.Err(), gate.ErrFailed))
	// Output:
	// [-]schema locked for 3s (migrating schema 41 to 42)
	// readyz check failed
	// [-]schema failed: table agents: disk full
	// readyz check failed
	// true schema true
}
