package listener_test

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/listener"
)

// waitClosed fails the test unless ch closes within guard.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s did not close", what)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s closed", what)
	default:
	}
}

// The API port opens when the channel it was given closes, with no
// goroutine of the caller's: agents are refused before, served after, by a
// real http.Server.
func TestOpenAPIWhenOpensTheAPIPortWhenTheChannelCloses(t *testing.T) {
	stable := make(chan struct{})
	var apiAddr net.Addr
	bound := make(chan struct{})
	l := newListener(t, listener.Config{
		OnBound: func(p listener.Port, a net.Addr) {
			if p == listener.API {
				apiAddr = a
				close(bound)
			}
		},
	})
	require.NoError(t, l.OpenAPIWhen("stable", stable))
	srv := &http.Server{Handler: loginHandler(), ConnContext: listener.ConnContext}
	defer serve(t, srv, func() error { return srv.Serve(l) })()
	client := &http.Client{Transport: &http.Transport{}, Timeout: guard}
	defer client.CloseIdleConnections()

	_, body := get(t, client, "http://"+l.Addr().String()+"/port")
	assert.Equal(t, "controller", body)
	assert.Nil(t, l.APIAddr(), "the API port is bound before the channel closes")
	assertOpen(t, l.Completed(), "Completed")

	close(stable)
	waitClosed(t, l.Completed(), "Completed")
	<-bound
	assertOpen(t, l.Failed(), "Failed")
	require.NoError(t, l.Cause())
	assert.Equal(t, apiAddr.String(), l.APIAddr().String())
	code, body := get(t, client, "http://"+apiAddr.String()+"/agent-login")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "welcome", body)
	assert.True(t, l.Report().API.Open)
}

// A bind failure of the open nobody called is not lost: Failed closes,
// Cause and Report say why, the listener stays controller-only, and a
// later OpenAPI may still open the port.
func TestOpenAPIWhenBindFailureIsReported(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer squatter.Close()
	addr := squatter.Addr().String()
	stable := make(chan struct{})
	l := newListener(t, listener.Config{APIAddr: addr})
	require.NoError(t, l.OpenAPIWhen("stable", stable))

	close(stable)
	waitClosed(t, l.Failed(), "Failed")
	assertOpen(t, l.Completed(), "Completed")
	err = l.Cause()
	require.ErrorIs(t, err, listener.ErrBind)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	var pe *listener.PortError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, listener.API, pe.Port)
	assert.Equal(t, addr, pe.Addr)
	rep := l.Report()
	assert.Equal(t, err, rep.API.OpenErr)
	assert.False(t, rep.API.Open)
	assert.NoError(t, rep.Err, "a bind failure does not kill the listener")

	dial(t, l.Addr())
	mustAccept(t, l, listener.Controller)

	require.NoError(t, squatter.Close())
	require.NoError(t, l.OpenAPI())
	waitClosed(t, l.Completed(), "Completed after a later OpenAPI")
	dial(t, l.APIAddr())
	mustAccept(t, l, listener.API)
}

// Close before the channel closes ends the wait (goleak checks the
// goroutine is gone) and resolves Failed with net.ErrClosed, so a board
// watching the port does not show it locked for ever; closing the channel
// afterwards binds nothing.
func TestCloseBeforeOpenAPIWhenBindsNothing(t *testing.T) {
	stable := make(chan struct{})
	seq := &listenSeq{fakes: []net.Listener{newFake(1), newFake(2)}}
	l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
	require.NoError(t, err)
	require.NoError(t, l.OpenAPIWhen("stable", stable))
	require.NoError(t, l.Close())
	close(stable)
	waitClosed(t, l.Failed(), "Failed")
	require.ErrorIs(t, l.Cause(), net.ErrClosed)
	assert.Equal(t, 1, seq.count(), "the API port was bound after Close")
	assertOpen(t, l.Completed(), "Completed")
	require.ErrorIs(t, l.OpenAPIWhen("stable", stable), net.ErrClosed, "after Close, as OpenAPI")
}

// With BindAPIEarly and CloseAPI (to learn the port, then refuse agents),
// the channel still opens the port, at the number first bound.
func TestOpenAPIWhenAfterEarlyBindAndCloseAPI(t *testing.T) {
	stable := make(chan struct{})
	l := newListener(t, listener.Config{BindAPIEarly: true})
	first := l.APIAddr()
	require.NotNil(t, first)
	require.NoError(t, l.OpenAPIWhen("stable", stable))
	require.NoError(t, l.CloseAPI())
	require.Nil(t, l.APIAddr())

	close(stable)
	waitClosed(t, l.Completed(), "Completed")
	require.Equal(t, first.String(), l.APIAddr().String())
	c := dial(t, l.APIAddr())
	s := mustAccept(t, l, listener.API)
	_, err := io.WriteString(c, "x")
	require.NoError(t, err)
	buf := make([]byte, 1)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
}

// A permanent accept failure before the API port opened resolves Failed
// with that failure.
func TestAFailureBeforeTheAPIPortOpenedIsItsErr(t *testing.T) {
	ctrl := newFake(1)
	seq := &listenSeq{fakes: []net.Listener{ctrl, newFake(2)}}
	l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.OpenAPIWhen("stable", make(chan struct{})))
	ctrl.give(t, nil, syscall.EBADF)
	_, failure := l.Accept()
	require.ErrorIs(t, failure, listener.ErrAcceptFailed)
	waitClosed(t, l.Failed(), "Failed")
	require.Equal(t, failure, l.Cause())
}

// OnBound may Close the listener, also when the OpenAPIWhen watcher calls
// it (before the fix Close waited for that very goroutine, for ever): the
// API port bound for it is released and Failed says why.
func TestCloseFromOnBoundWithOpenAPIWhen(t *testing.T) {
	when := make(chan struct{})
	var l *listener.Listener
	closed := make(chan error, 1)
	l, err := listener.New(listener.Config{ControllerAddr: "127.0.0.1:0", APIAddr: "127.0.0.1:0",
		OnBound: func(p listener.Port, _ net.Addr) {
			if p == listener.API {
				closed <- l.Close()
			}
		}})
	require.NoError(t, err)
	require.NoError(t, l.OpenAPIWhen("", when))
	close(when)
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(guard):
		t.Fatal("Close from OnBound never returned")
	}
	waitClosed(t, l.Failed(), "Failed")
	assert.ErrorIs(t, l.Cause(), net.ErrClosed)
	assertOpen(t, l.Completed(), "Completed")
	assert.Nil(t, l.APIAddr())
	assert.NoError(t, l.Close(), "idempotent")
}

// The listener exists before what its API port waits for: OpenAPIWhen,
// called once the rest of startup is built (a Dialer needs the controller
// port first), opens the port when the channel closes, and Detail says, in
// an operator's words, what it waits for: never a Go name.
func TestOpenAPIWhenDetailSaysWhatThePortWaitsFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool
		call  bool
		what  string
		want  string
	}{
		{name: "no call", want: "waits to be opened"},
		{name: "named", call: true, what: "stable", want: "opens once stable"},
		{name: "unnamed", call: true, want: "opens when its open signal closes"},
		{name: "named, bound early", early: true, call: true, what: "stable", want: "opens once stable, bound at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newListener(t, listener.Config{BindAPIEarly: tc.early})
			ready := make(chan struct{})
			if tc.call {
				require.NoError(t, l.OpenAPIWhen(tc.what, ready))
			}
			want := tc.want
			if tc.early {
				want += l.APIAddr().String()
			}
			assert.Equal(t, want, l.Detail())
			if !tc.call {
				return
			}
			close(ready)
			waitClosed(t, l.Completed(), "Completed")
			assert.Empty(t, l.Detail(), "nothing to wait for once open")
		})
	}
}

// A nil channel never closes: OpenAPIWhen refuses it at the call rather
// than wait for ever, and starts nothing.
func TestOpenAPIWhenRefusesANilChannel(t *testing.T) {
	l := newListener(t, listener.Config{})
	err := l.OpenAPIWhen("stable", nil)
	require.Error(t, err)
	assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)
	assert.Equal(t, "waits to be opened", l.Detail(), "a refused call names nothing")
}

// Each call waits on its own channel: a controller that became unstable
// closes the API port and has it reopen on its next stable gate.
func TestOpenAPIWhenAgainAfterCloseAPI(t *testing.T) {
	binds := make(chan net.Addr, 2)
	l := newListener(t, listener.Config{OnBound: func(p listener.Port, a net.Addr) {
		if p == listener.API {
			binds <- a
		}
	}})
	first := make(chan struct{})
	require.NoError(t, l.OpenAPIWhen("stable", first))
	close(first)
	waitClosed(t, l.Completed(), "Completed")
	addr := l.APIAddr()
	require.NotNil(t, addr)

	require.NoError(t, l.CloseAPI())
	again := make(chan struct{})
	require.NoError(t, l.OpenAPIWhen("stable again", again))
	assert.False(t, l.Report().API.Open, "closed until the new channel closes")
	close(again)
	for range 2 {
		select {
		case a := <-binds:
			assert.Equal(t, addr.String(), a.String(), "at the address first bound")
		case <-time.After(guard):
			t.Fatal("the API port was not bound again")
		}
	}
	dial(t, addr)
	mustAccept(t, l, listener.API)
	assert.True(t, l.Report().API.Open)
}

// Close ends every watcher still waiting (none outlives the listener), and
// Failed says why the port never opened.
func TestCloseEndsEveryOpenAPIWhenWatcher(t *testing.T) {
	before := goleak.IgnoreCurrent()
	l, err := listener.New(loopback(listener.Config{}))
	require.NoError(t, err)
	for _, what := range []string{"stable", "upgraded"} {
		require.NoError(t, l.OpenAPIWhen(what, make(chan struct{})))
	}
	require.NoError(t, l.Close())
	goleak.VerifyNone(t, before)
	require.ErrorIs(t, l.Cause(), net.ErrClosed)
}
