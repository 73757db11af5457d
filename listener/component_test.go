package listener_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/listener"
)

// The API port is a gate.Component as it is: a test may import gate, the
// package does not.
var _ gate.Component = (*listener.Listener)(nil)

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

// board.Follow("api-port", l) shows the API port's bind error in its own
// words, with no adapter: the entry fails with the *PortError.
func TestABoardFollowingTheListenerShowsTheBindError(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer squatter.Close()
	stable := make(chan struct{})
	l := newListener(t, listener.Config{APIAddr: squatter.Addr().String()})
	b := gate.NewBoard(gate.BoardConfig{})
	b.Follow("api-port", l)
	require.NoError(t, l.OpenAPIWhen("stable", stable))

	e := entry(t, b, "api-port")
	assert.Equal(t, gate.StateLocked, e.State)
	assert.Equal(t, "opens once stable", e.Detail)

	close(stable)
	waitClosed(t, l.Failed(), "Failed")
	e = entry(t, b, "api-port")
	require.Equal(t, gate.StateFailed, e.State)
	assert.ErrorIs(t, e.Err, listener.ErrBind)
	assert.ErrorIs(t, e.Err, syscall.EADDRINUSE)
	assert.Contains(t, b.Report().String(), squatter.Addr().String(), "the report names the address")
}

// An open API port opens its entry.
func TestABoardFollowingTheListenerOpensWithTheAPIPort(t *testing.T) {
	l := newListener(t, listener.Config{BindAPIEarly: true})
	b := gate.NewBoard(gate.BoardConfig{})
	b.Follow("api-port", l)
	e := entry(t, b, "api-port")
	assert.Equal(t, gate.StateLocked, e.State)
	assert.Equal(t, "waits to be opened, bound at "+l.APIAddr().String(), e.Detail)
	require.NoError(t, l.OpenAPI())
	waitClosed(t, l.Completed(), "Completed")
	assert.Equal(t, gate.StateUnlocked, entry(t, b, "api-port").State)
	assert.Empty(t, l.Detail(), "nothing to wait for once open")
	assert.NoError(t, l.Cause())
}

// Closing a listener whose API port never opened fails the entry with
// net.ErrClosed, so a board following it stops following.
func TestABoardFollowingAClosedListenerFails(t *testing.T) {
	l := newListener(t, listener.Config{})
	b := gate.NewBoard(gate.BoardConfig{})
	b.Follow("api-port", l)
	require.NoError(t, l.Close())
	e := entry(t, b, "api-port")
	require.Equal(t, gate.StateFailed, e.State)
	assert.True(t, errors.Is(e.Err, net.ErrClosed), "%v", e.Err)
	assert.True(t, strings.Contains(e.Err.Error(), "closed"), "%v", e.Err)
}
