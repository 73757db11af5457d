// Command startuporder shows a controller's startup ordering rule written
// with gates, a leader-only worker that runs after it (singular.go: Lead in
// a few lines), and (in startup_test.go) how to unit-test both with
// testclock, gatetest and leasetest: no sleeps, no ports, no flakes.
//
// The rule: the public API port opens only once the controller port is
// bound, the controller has dialled itself, and the upgrade steps have run.
// A failed upgrade never opens it. The singular worker runs only once the
// API port is open, and only while this controller holds the lease.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Steps are the actions a controller's startup sequences. Real code binds
// a listener.Listener, dials through a dialer.Dialer and runs upgrade steps
// behind an upgrade.Gate; tests pass fakes.
type Steps struct {
	BindControllerPort func() error
	SelfDial           func(ctx context.Context) error // retried until it succeeds
	RunUpgradeSteps    func(ctx context.Context) error
	OpenAPIPort        func() error
}

// Startup holds the gates of one controller's startup, on a board so a
// stalled startup can say what it is waiting on.
type Startup struct {
	Board          *gate.Board
	ControllerPort *gate.Lock
	SelfDialed     *gate.Lock
	Upgraded       *gate.Lock
	Stable         *gate.Lock // all three of the above
	APIOpen        *gate.Lock

	clk        clock.Clock
	steps      Steps
	retryDelay time.Duration
}

// NewStartup returns a startup whose self-dial retries every retryDelay on clk.
func NewStartup(clk clock.Clock, steps Steps, retryDelay time.Duration) *Startup {
	s := &Startup{
		Board:          gate.NewBoard(gate.BoardConfig{Clock: clk}),
		ControllerPort: gate.New("controller-port"),
		SelfDialed:     gate.New("self-dial"),
		Upgraded:       gate.New("upgrade-steps"),
		clk:            clk,
		steps:          steps,
		retryDelay:     retryDelay,
	}
	s.Stable = gate.AllOf("stable", s.ControllerPort, s.SelfDialed, s.Upgraded)
	s.APIOpen = gate.New("api-port").After(s.Stable) // Run opens it once stable has: the Timeline's critical chain follows it
	for _, l := range []*gate.Lock{s.ControllerPort, s.SelfDialed, s.Upgraded, s.APIOpen, s.Stable} {
		s.Board.Add(l.Name(), l)
	}
	return s
}

// Run starts the controller and returns once the API port is open, or
// with the error that keeps it closed. Every goroutine it starts has ended
// when it returns.
func (s *Startup) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	if err := s.steps.BindControllerPort(); err != nil {
		s.ControllerPort.Fail(err)
		return fmt.Errorf("binding the controller port: %w", err)
	}
	s.ControllerPort.Unlock()

	wg.Add(2)
	go func() {
		defer wg.Done()
		s.selfDial(ctx)
	}()
	go func() {
		defer wg.Done()
		if err := s.steps.RunUpgradeSteps(ctx); err != nil {
			s.Upgraded.Fail(err)
			return
		}
		s.Upgraded.Unlock()
	}()

	if err := gate.Wait(ctx, s.Stable); err != nil {
		return fmt.Errorf("API port stays closed: %w", err)
	}
	if err := s.steps.OpenAPIPort(); err != nil {
		s.APIOpen.Fail(err)
		return fmt.Errorf("opening the API port: %w", err)
	}
	s.APIOpen.Unlock()
	return nil
}

func (s *Startup) selfDial(ctx context.Context) {
	for {
		err := s.steps.SelfDial(ctx)
		if err == nil {
			s.SelfDialed.Unlock()
			return
		}
		select {
		case <-s.clk.After(s.retryDelay):
		case <-ctx.Done():
			return
		}
	}
}

func main() {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6dms  %s\n", time.Since(start).Milliseconds(), fmt.Sprintf(format, args...))
	}
	dials := 0
	s := NewStartup(clock.WallClock, Steps{
		BindControllerPort: func() error { say("controller port bound"); return nil },
		SelfDial: func(ctx context.Context) error {
			if dials++; dials < 3 {
				say("self-dial %d: connection refused (server not up yet)", dials)
				return errors.New("connection refused")
			}
			say("self-dial %d: connected to 127.0.0.1", dials)
			return nil
		},
		RunUpgradeSteps: func(ctx context.Context) error {
			say("upgrade steps running")
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			say("upgrade steps done")
			return nil
		},
		OpenAPIPort: func() error { say("API port open"); return nil },
	}, 50*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "startup failed:", err, "-", s.Board.Report())
		os.Exit(1)
	}
	fmt.Println("opened in order:", s.Board.Report().Opened())
	fmt.Print("critical chain:\n", s.Board.Timeline().CriticalChain("api-port"))

	tr, err := lease.NewTracker(lease.Config{
		Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}), Name: "singular", Holder: "c0", Duration: time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	err = s.RunSingular(ctx, tr, func(ctx context.Context, token uint64) error {
		say("leading (token %d): the singular worker runs", token)
		time.AfterFunc(100*time.Millisecond, func() { _ = tr.StepDown(context.Background()) }) // hand over
		<-ctx.Done()
		say("singular worker stopped: %v", context.Cause(ctx))
		return errStop // done for this demo
	})
	if !errors.Is(err, errStop) {
		fmt.Fprintln(os.Stderr, "singular worker:", err)
		os.Exit(1)
	}
}

// errStop ends the demo's singular worker.
var errStop = errors.New("demo over")
