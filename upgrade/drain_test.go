package upgrade_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade"
)

// drainingGate is a complete gate that drains (Drain) once drain closes
// and grace has passed on clk; entered closes when it does.
func drainingGate(t *testing.T, clk *testclock.Clock, drain <-chan struct{}, grace time.Duration, peer bool) (g *upgrade.Gate, entered <-chan struct{}) {
	in := make(chan struct{})
	g = upgrade.NewGate(upgrade.GateConfig{
		Clock: clk, PeerReady: func() bool { return peer },
		OnTransition: func(_, to upgrade.Phase, _ error) {
			if to == upgrade.PhaseDraining {
				close(in)
			}
		},
	})
	g.Complete()
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- g.Drain(ctx, drain, grace) }()
	t.Cleanup(func() {
		cancel()
		<-drained
	})
	return g, in
}

// connStates reports each connection's end on a server.
func closedConns(srv *httptest.Server) <-chan net.Conn {
	closed := make(chan net.Conn, 16)
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- c
		}
	}
	return closed
}

func requireClosed(t *testing.T, closed <-chan net.Conn, why string) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal(why)
	}
}

// Drain mirrors startup: calls are served through the grace (readiness
// falls first, elsewhere), then new calls are refused with the upgrade
// wire and Connection: close, while a call in flight finishes.
func TestDrainRefusesNewCallsOnceTheGraceHasPassed(t *testing.T) {
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	g, entered := drainingGate(t, clk, drain, 5*time.Second, true)
	inside, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewUnstartedServer(upgrade.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(inside)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})))
	closed := closedConns(srv)
	srv.Start()
	defer srv.Close()
	released := false
	defer func() { // before srv.Close, which waits for the handler
		if !released {
			close(release)
		}
	}()
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/slow")
		assert.NoError(t, err)
		slow <- resp
	}()
	<-inside

	close(drain)
	require.NoError(t, clk.WaitAdvance(5*time.Second-time.Nanosecond, waitTimeout, 1))
	assert.NoError(t, g.Admit(false), "served through the grace")
	clk.Advance(time.Nanosecond)
	<-entered
	var ip *upgrade.InProgressError
	require.ErrorAs(t, g.Admit(false), &ip)
	assert.Equal(t, upgrade.InProgressError{Phase: upgrade.PhaseDraining, RetryDelay: upgrade.DefaultRetryAfter, PeerReady: true}, *ip)
	assert.Equal(t, "upgrade in progress (draining before a restart); call not executed; a ready peer can serve it; retry after 1s", ip.Error())

	resp, err := http.Get(srv.URL + "/new")
	require.NoError(t, err)
	refusal := upgrade.ErrorFromResponse(resp)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, []string{"1", "2"}, resp.Header.Get("Retry-After"))
	assert.True(t, resp.Close, "Connection: close")
	requireClosed(t, closed, "the server closes an HTTP/1.1 connection after a drain refusal")
	require.ErrorAs(t, refusal, &ip)
	assert.Equal(t, upgrade.PhaseDraining, ip.Phase)
	assert.True(t, ip.PeerReady, "the client learns a ready peer can serve")

	close(release)
	released = true
	resp = <-slow
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "done", string(body), "the call in flight finished")

	assert.Error(t, g.Enter(upgrade.PhaseRunningSteps), "a draining gate stays draining")
	g.Fail(errors.New("late"))
	assert.Equal(t, upgrade.PhaseDraining, g.Phase())
	assert.Equal(t, "draining before a restart", g.Detail())
}

// On HTTP/2, Connection: close becomes a GOAWAY (net/http's server does
// it): the client's next call goes on a new connection, and the drained
// one closes.
func TestDrainSendsGOAWAYOnHTTP2(t *testing.T) {
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	g, entered := drainingGate(t, clk, drain, 0, false)
	srv := httptest.NewUnstartedServer(upgrade.Middleware(g, nil)(&served{}))
	srv.EnableHTTP2 = true
	closed := closedConns(srv)
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	get := func() (*http.Response, error) {
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		refusal := upgrade.ErrorFromResponse(resp)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp, refusal
	}
	resp, refusal := get()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.NoError(t, refusal)
	close(drain)
	<-entered
	resp, refusal = get()
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.ErrorIs(t, refusal, upgrade.ErrUpgradeInProgress)
	requireClosed(t, closed, "the server sends a GOAWAY after a drain refusal and closes the connection once idle")
	_, refusal = get()
	var ip *upgrade.InProgressError
	require.ErrorAs(t, refusal, &ip, "a new connection, refused too")
	assert.Equal(t, upgrade.PhaseDraining, ip.Phase)
	assert.False(t, ip.PeerReady)
}

// A controller's own client, in its process, learns the end of the
// upgrade from the gate rather than sleeping out the hint; a channel that
// woke it once does not again (a gate still refusing is waited out).
func TestRetryWakesOnTheGate(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{Clock: clk})
	require.NoError(t, g.SetRetryAfter(time.Hour))
	waits := make(chan time.Duration, 4)
	done := make(chan error, 1)
	go func() {
		done <- upgrade.Retry(context.Background(), func(context.Context) error { return g.Admit(false) },
			upgrade.WithClock(clk), upgrade.WithWake(g.Completed),
			upgrade.WithNotify(func(_ int, _ error, wait time.Duration) { waits <- wait }))
	}()
	assert.Equal(t, time.Hour, <-waits)
	g.Complete()
	require.NoError(t, <-done, "woken by the gate, not by the clock")

	drain := make(chan struct{})
	g, entered := drainingGate(t, clk, drain, 0, false)
	close(drain)
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- upgrade.Retry(ctx, func(context.Context) error { return g.Admit(false) },
			upgrade.WithClock(clk), upgrade.WithWake(g.Completed),
			upgrade.WithNotify(func(_ int, _ error, wait time.Duration) { waits <- wait }))
	}()
	<-waits // the gate's Completed is closed already: one wait ends at once
	<-waits
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1), "the next is waited out on the clock")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// An agent's call through RetryTransport across its controller's restart:
// refused while the server drains, then refused a connection while it is
// down (nothing sent either time), then served by the new process. The
// caller sees one answer, never a failure.
func TestRetryTransportWaitsOutARestartAfterADrain(t *testing.T) {
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	old, entered := drainingGate(t, clk, drain, 0, false)
	close(drain)
	<-entered
	first := httptest.NewServer(upgrade.Middleware(old, nil)(&served{}))
	addr := first.Listener.Addr().String()

	waits := make(chan error, 4)
	client := &http.Client{Transport: upgrade.RetryTransport(&http.Transport{}, upgrade.WithClock(clk),
		upgrade.WithNotify(func(_ int, err error, _ time.Duration) { waits <- err }))}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := client.Get("http://" + addr + "/deploy")
		assert.NoError(t, err, "a restart is not a failure")
		answered <- resp
	}()
	assert.ErrorIs(t, <-waits, upgrade.ErrUpgradeInProgress, "refused while draining")
	first.Close() // the process stops
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, 1))
	select {
	case err := <-waits:
		assert.ErrorContains(t, err, "connection refused", "down: waited out too")
	case <-answered:
		t.Fatal("the call ended while its server was down")
	}

	l, err := net.Listen("tcp", addr) // the new process, on the same port, upgraded
	require.NoError(t, err)
	upgraded := upgrade.NewGate(upgrade.GateConfig{})
	upgraded.Complete()
	next := &httptest.Server{Listener: l, Config: &http.Server{Handler: upgrade.Middleware(upgraded, nil)(&served{})}}
	next.Start()
	defer next.Close()
	require.NoError(t, clk.WaitAdvance(time.Minute, waitTimeout, 1))
	resp := <-answered
	require.NotNil(t, resp)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// Drain waits in its caller's goroutine, bounded by its ctx: a stop that
// never comes (a board closed without a drain) leaves nothing behind.
func TestDrainEndsWithItsCtx(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, g.Drain(ctx, make(chan struct{}), time.Second), context.Canceled)
	assert.Equal(t, upgrade.PhaseChecking, g.Phase(), "nothing changed")
	err := g.Drain(context.Background(), nil, -time.Second)
	assert.True(t, jujuerrors.Is(err, jujuerrors.NotValid))
	assert.EqualError(t, err, "grace -1s (must be zero or more) not valid")
	require.NoError(t, g.Drain(context.Background(), nil, 0))
	require.NoError(t, g.Drain(context.Background(), nil, 0), "draining already")
	assert.Equal(t, upgrade.PhaseDraining, g.Phase())
}
