package metrics_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/listener"
	"github.com/coldstart-go/coldstart/upgrade"
)

// t0 is when every fixture's testclock starts: Unix 1767225600.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// wait bounds every wait for a goroutine of a real component.
const wait = 10 * time.Second

// world is one controller's components, each driven into a known state;
// the expected exposition of each is in metrics_test.go.
type world struct {
	clk      *testclock.Clock // the trackers' and the upgrade gate's
	boardClk *testclock.Clock
	board    *gate.Board
	ln       *listener.Listener
	local    *dialer.Dialer       // dialled its own controller once
	agent    *dialer.Dialer       // fell back to a peer once, failed once
	store    *leasestore.MemStore // the trackers'
	leader   *lease.Tracker       // c0: holds "singular-controller", renewed once
	follower *lease.Tracker       // c1: told c0 holds it
	upgrades *upgrade.Gate
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{clk: testclock.NewClock(t0), boardClk: testclock.NewClock(t0)}
	w.newBoard(t)
	w.newListener(t)
	w.newDialers(t)
	w.newTrackers(t)
	w.newUpgrade(t)
	return w
}

// newBoard: controller-port opened after 2 s, mongo failed after 3 s,
// api-caller locked for 5 s.
func (w *world) newBoard(t *testing.T) {
	w.board = gate.NewBoard(gate.BoardConfig{Clock: w.boardClk})
	port := add(w.board, "controller-port")
	mongo := add(w.board, "mongo")
	add(w.board, "api-caller")
	w.boardClk.Advance(2 * time.Second)
	port.Unlock()
	w.boardClk.Advance(time.Second)
	mongo.Fail(errors.New("no quorum"))
	w.boardClk.Advance(2 * time.Second)
}

// newListener: a real listener on loopback. The controller port accepted
// three connections, one of them since closed; the API port, opened,
// accepted one.
func (w *world) newListener(t *testing.T) {
	ln, err := listener.New(listener.Config{ControllerAddr: "127.0.0.1:0", APIAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	w.ln = ln
	t.Cleanup(func() { _ = ln.Close() })
	var served []net.Conn
	t.Cleanup(func() {
		for _, c := range served {
			_ = c.Close()
		}
	})
	accept := func(addr net.Addr) net.Conn {
		client, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		c, err := ln.Accept()
		require.NoError(t, err)
		served = append(served, c)
		return c
	}
	accept(ln.Addr())
	accept(ln.Addr())
	require.NoError(t, accept(ln.Addr()).Close())
	require.NoError(t, ln.OpenAPI())
	accept(ln.APIAddr())
}

// newDialers: local dials its own controller, a plain loopback socket;
// agent, whose "local controller" port refuses, falls back to that socket
// as its peer, then fails a call whose ctx has ended.
func (w *world) newDialers(t *testing.T) {
	ctrl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctrl.Close() })
	go func() {
		for {
			c, err := ctrl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctrlPort := ctrl.Addr().(*net.TCPAddr).Port
	ready := make(chan struct{})
	close(ready)

	w.local, err = dialer.New(dialer.Config{LocalPort: ctrlPort, LocalReady: ready})
	require.NoError(t, err)
	dial(t, w.local)

	w.agent, err = dialer.New(dialer.Config{
		LocalPort:  closedPort(t),
		LocalReady: ready,
		Policy:     dialer.PreferLocal,
		Remote:     func() []string { return []string{ctrl.Addr().String()} },
	})
	require.NoError(t, err)
	dial(t, w.agent)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = w.agent.Dial(ctx)
	require.Error(t, err)
}

func dial(t *testing.T, d *dialer.Dialer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, _, err := d.Dial(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// closedPort returns a loopback port nothing listens on: one the kernel
// just gave out and took back.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// newTrackers: c0 claims "singular-controller" at t0 (token 1) and renews
// it 9.5 s later; c1 then claims and is told c0 holds it.
func (w *world) newTrackers(t *testing.T) {
	w.store = leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: w.clk})
	start := func(holder string) *lease.Tracker {
		tr, err := lease.NewTracker(lease.Config{
			Store: w.store, Name: "singular-controller", Holder: holder,
			Duration: 10 * time.Second, Clock: w.clk,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	w.leader = start("c0")
	_, err := leasetest.Settle(ctx, w.leader, w.clk, 1)
	require.NoError(t, err)
	// The renewal comes half-way through the validity or a little earlier
	// (jitter): at 9.5 s it has gone, at that time.
	w.clk.Advance(9500 * time.Millisecond)
	_, err = leasetest.Settle(ctx, w.leader, w.clk, 2)
	require.NoError(t, err)
	w.follower = start("c1")
	_, err = leasetest.Settle(ctx, w.follower, w.clk, 1)
	require.NoError(t, err)
}

// newUpgrade: the first attempt refused a call while checking, refused two
// and admitted one (allowlisted) while running its steps, and failed, then
// refused one more; the second attempt, checking, admitted one.
func (w *world) newUpgrade(t *testing.T) {
	w.upgrades = upgrade.NewGate(upgrade.GateConfig{Clock: w.clk})
	decide := func(allowlisted bool, refused bool) {
		t.Helper()
		require.Equal(t, refused, w.upgrades.Admit(allowlisted) != nil)
	}
	decide(false, true)
	require.NoError(t, w.upgrades.Enter(upgrade.PhaseRunningSteps))
	decide(false, true)
	decide(false, true)
	decide(true, false)
	w.upgrades.Fail(errors.New("upgrade steps: disk full"))
	decide(false, true)
	require.NoError(t, w.upgrades.Enter(upgrade.PhaseChecking))
	decide(true, false)
}

// add puts a new gate named name on b.
func add(b *gate.Board, name string) *gate.Lock {
	l := gate.New(name)
	b.Add(name, l)
	return l
}
