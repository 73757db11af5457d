package dialer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
)

// The Dialer is a gate.Component as it is: a test may import gate, the
// package does not.
var _ gate.Component = (*dialer.Dialer)(nil)

// entry returns the board's entry named name.
func entry(t *testing.T, b *gate.Board, name string) gate.Entry {
	t.Helper()
	for _, e := range b.Report() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no entry %q on the board", name)
	return gate.Entry{}
}

// TestABoardFollowsTheDialerHome: board.Follow("self-dial", d), made
// before anything dials (as a controller makes it, before its API port may
// open), opens at the Dialer's first local connection once LocalReady has
// closed, with no goroutine, gate or ping of the caller's, and says
// meanwhile what it waits for. A peer connection, before or after
// LocalReady, does not open it; LocalReady alone does not either. Real
// servers: a peer, and the local controller once it serves.
func TestABoardFollowsTheDialerHome(t *testing.T) {
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	local := reserve(t)
	ready := make(chan struct{})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peer.addr()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Second,
		Clock:           clk,
	})
	b := gate.NewBoard(gate.BoardConfig{})
	defer b.Close()
	selfDial := b.Follow("self-dial", d)
	e := entry(t, b, "self-dial")
	assert.Equal(t, gate.StateLocked, e.State)
	assert.Equal(t, "waits for the local controller to serve", e.Detail)

	// Before the local server is ready a Dial waits out the grace, then
	// goes to the peer: not home.
	done := goDial(context.Background(), d)
	require.NoError(t, clk.WaitAdvance(time.Second, waitFor, 1))
	r := result(t, done)
	require.NoError(t, r.err)
	require.False(t, r.route.Local)
	require.NoError(t, r.conn.Close())
	e = entry(t, b, "self-dial")
	assert.Equal(t, gate.StateLocked, e.State)
	assert.Equal(t, "waits for the local controller to serve", e.Detail)

	ln, err := local.listen()
	require.NoError(t, err)
	srv := serve("local", ln, nil)
	defer srv.stop()
	close(ready)
	e = entry(t, b, "self-dial")
	assert.Equal(t, gate.StateLocked, e.State, "ready, but nothing has dialled it")
	assert.Equal(t, "local controller serving, not dialled yet", e.Detail)

	r = result(t, goDial(context.Background(), d))
	require.NoError(t, r.err)
	require.True(t, r.route.Local)
	reply, err := roundTrip(r.conn, "hello")
	require.NoError(t, err)
	assert.Equal(t, "local hello", reply)
	require.NoError(t, r.conn.Close())
	select {
	case <-selfDial.Unlocked():
	case <-time.After(waitFor):
		t.Fatal("the self-dial entry did not open at the first local connection")
	}
	e = entry(t, b, "self-dial")
	assert.Equal(t, gate.StateUnlocked, e.State)
	assert.Empty(t, d.Detail(), "nothing to wait for once home")
	assert.NoError(t, d.Cause())
	assert.Nil(t, d.Failed(), "a Dialer with a local controller never fails")
}

// A machine without a controller has no home to move to: a board
// following its Dialer fails the entry at once and says why, rather than
// show it locked for ever (or panic on two nil channels).
func TestABoardFollowingADialerWithoutALocalControllerFails(t *testing.T) {
	peer := startServer(t, "peer", "127.0.0.1:0", nil)
	d := mustNew(t, dialer.Config{Policy: dialer.PreferLocal, Remote: func() []string { return []string{peer.addr()} }})
	assert.Nil(t, d.Completed())
	b := gate.NewBoard(gate.BoardConfig{})
	defer b.Close()
	b.Follow("self-dial", d)
	e := entry(t, b, "self-dial")
	require.Equal(t, gate.StateFailed, e.State)
	require.Error(t, d.Cause())
	assert.ErrorIs(t, e.Err, d.Cause())
	assert.Contains(t, e.Err.Error(), "no local controller (LocalPort 0)")
}
