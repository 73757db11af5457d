package listener_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/coldstart-go/coldstart/internal/logtest"
	"github.com/coldstart-go/coldstart/listener"
)

func TestConfigValidate(t *testing.T) {
	ok := listener.Config{ControllerAddr: "127.0.0.1:17071", APIAddr: ":17070"}
	with := func(f func(*listener.Config)) listener.Config {
		c := ok
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		cfg   listener.Config
		valid bool
	}{
		{"minimal", ok, true},
		{"both port 0 on one address", listener.Config{ControllerAddr: ":0", APIAddr: ":0"}, true},
		{"no ControllerAddr", with(func(c *listener.Config) { c.ControllerAddr = "" }), false},
		{"no APIAddr", with(func(c *listener.Config) { c.APIAddr = "" }), false},
		{"ControllerAddr without port", with(func(c *listener.Config) { c.ControllerAddr = "127.0.0.1" }), false},
		{"APIAddr without port", with(func(c *listener.Config) { c.APIAddr = "localhost" }), false},
		{"same fixed address twice", listener.Config{ControllerAddr: ":17070", APIAddr: ":17070"}, false},
		{"IPv6", listener.Config{ControllerAddr: "[::1]:0", APIAddr: "[::]:17070"}, true},
		{"rate, default burst", with(func(c *listener.Config) { c.APIRate = 2000 }), true},
		{"rate, burst at minimum", with(func(c *listener.Config) { c.APIRate = 2000; c.APIBurst = 4 }), true},
		{"rate, burst below minimum", with(func(c *listener.Config) { c.APIRate = 2000; c.APIBurst = 3 }), false},
		{"slow rate, burst 1", with(func(c *listener.Config) { c.APIRate = 0.5; c.APIBurst = 1 }), true},
		{"rate.Inf means unlimited", with(func(c *listener.Config) { c.APIRate = rate.Inf }), true},
		{"negative rate", with(func(c *listener.Config) { c.APIRate = -1 }), false},
		{"NaN rate", with(func(c *listener.Config) { c.APIRate = rate.Limit(math.NaN()) }), false},
		{"negative burst", with(func(c *listener.Config) { c.APIRate = 10; c.APIBurst = -1 }), false},
		{"burst without rate", with(func(c *listener.Config) { c.APIBurst = 10 }), false},
		{"cap", with(func(c *listener.Config) { c.APIMaxConns = 100 }), true},
		{"negative cap", with(func(c *listener.Config) { c.APIMaxConns = -1 }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.valid {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, jujuerrors.NotValid), "%v does not match NotValid", err)
			// New refuses it too, binding nothing.
			l, err := listener.New(tt.cfg)
			require.Nil(t, l)
			require.True(t, errors.Is(err, jujuerrors.NotValid))
		})
	}
}

func TestMinBurst(t *testing.T) {
	for _, tt := range []struct {
		rate rate.Limit
		want int
	}{
		{0.1, 1}, {1, 1}, {499, 1}, {500, 1}, {501, 2}, {2000, 4}, {2001, 5}, {1e6, 2000},
	} {
		assert.Equal(t, tt.want, listener.MinBurst(tt.rate), "rate %v", tt.rate)
	}
}

func TestPortString(t *testing.T) {
	assert.Equal(t, "controller", listener.Controller.String())
	assert.Equal(t, "api", listener.API.String())
	assert.Equal(t, "none", listener.Port(0).String())
	assert.Equal(t, "Port(7)", listener.Port(7).String())
}

func TestControllerPortServesBeforeAPIPortIsBound(t *testing.T) {
	var bound []listener.Port
	l := newListener(t, listener.Config{OnBound: func(p listener.Port, _ net.Addr) { bound = append(bound, p) }})

	require.Nil(t, l.APIAddr(), "the API port must not be bound before OpenAPI")
	require.Equal(t, []listener.Port{listener.Controller}, bound)
	c := dial(t, l.Addr())
	s := mustAccept(t, l, listener.Controller)
	assertSamePeer(t, s, c)

	r := l.Report()
	assert.True(t, r.Controller.Open)
	assert.Equal(t, l.Addr(), r.Controller.Addr)
	assert.Equal(t, uint64(1), r.Controller.Accepted)
	assert.Equal(t, 1, r.Controller.Conns)
	assert.False(t, r.API.Open)
	assert.Nil(t, r.API.Addr)
}

func TestSeveralPort0PortsEachReportedThroughOnBound(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "bind late", true: "bind early"}[early], func(t *testing.T) {
			var mu sync.Mutex
			bound := map[listener.Port][]net.Addr{}
			l := newListener(t, listener.Config{
				BindAPIEarly: early,
				OnBound: func(p listener.Port, a net.Addr) {
					mu.Lock()
					defer mu.Unlock()
					bound[p] = append(bound[p], a)
				},
			})
			require.NoError(t, l.OpenAPI())
			require.NoError(t, l.OpenAPI()) // idempotent: no second bind, no second report

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, bound[listener.Controller], 1)
			require.Len(t, bound[listener.API], 1)
			ctrl := bound[listener.Controller][0].(*net.TCPAddr)
			api := bound[listener.API][0].(*net.TCPAddr)
			assert.NotZero(t, ctrl.Port)
			assert.NotZero(t, api.Port)
			assert.NotEqual(t, ctrl.Port, api.Port)
			assert.Equal(t, l.Addr().String(), ctrl.String())
			assert.Equal(t, l.APIAddr().String(), api.String())

			// Each reported address reaches its own port.
			dial(t, ctrl)
			mustAccept(t, l, listener.Controller)
			dial(t, api)
			mustAccept(t, l, listener.API)
		})
	}
}

func TestBindAPIEarlyReservesTheAddressButAcceptsNothing(t *testing.T) {
	l := newListener(t, listener.Config{BindAPIEarly: true})
	require.NotNil(t, l.APIAddr())
	assert.False(t, l.Report().API.Open)

	// The agent's dial completes in the kernel's queue, but Accept does not
	// return it: the controller conn dialled afterwards comes out first.
	agent := dial(t, l.APIAddr())
	dial(t, l.Addr())
	mustAccept(t, l, listener.Controller)
	pending := acceptAsync(l)
	select {
	case r := <-pending:
		t.Fatalf("Accept returned %v, %v before OpenAPI", r.c, r.err)
	case <-time.After(50 * time.Millisecond):
	}

	require.NoError(t, l.OpenAPI())
	s, err := receive(t, pending)
	require.NoError(t, err)
	assert.Equal(t, listener.API, listener.PortOf(s))
	assertSamePeer(t, s, agent)
}

func TestCloseAPIReturnsToControllerOnlyWhileConnsLiveOn(t *testing.T) {
	var mu sync.Mutex
	var apiBinds []net.Addr
	l := newListener(t, listener.Config{OnBound: func(p listener.Port, a net.Addr) {
		if p == listener.API {
			mu.Lock()
			apiBinds = append(apiBinds, a)
			mu.Unlock()
		}
	}})
	require.NoError(t, l.OpenAPI())
	addr := l.APIAddr()
	agent := dial(t, addr)
	s := mustAccept(t, l, listener.API)

	require.NoError(t, l.CloseAPI())
	require.NoError(t, l.CloseAPI()) // idempotent
	assert.Nil(t, l.APIAddr())
	assert.False(t, l.Report().API.Open)

	// New agents are refused at once, not parked in a queue.
	_, err := net.DialTimeout("tcp", addr.String(), guard)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	// The accepted agent lives on, and the controller port still serves.
	assertEcho(t, s, agent)
	dial(t, l.Addr())
	mustAccept(t, l, listener.Controller)
	assert.Equal(t, 1, l.Report().API.Conns)

	// OpenAPI rebinds the same port number and reports it again.
	require.NoError(t, l.OpenAPI())
	require.Equal(t, addr.String(), l.APIAddr().String())
	dial(t, l.APIAddr())
	mustAccept(t, l, listener.API)
	mu.Lock()
	assert.Len(t, apiBinds, 2)
	mu.Unlock()
	assert.Equal(t, uint64(2), l.Report().API.Accepted)
}

func TestCloseAPIReleasesAnEarlyBoundSocket(t *testing.T) {
	l := newListener(t, listener.Config{BindAPIEarly: true})
	addr := l.APIAddr()
	require.NoError(t, l.CloseAPI())
	assert.Nil(t, l.APIAddr())
	_, err := net.DialTimeout("tcp", addr.String(), guard)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, l.OpenAPI())
	require.Equal(t, addr.String(), l.APIAddr().String())
}

func TestCloseWhileTheListenerHoldsAnAcceptedConn(t *testing.T) {
	// Nobody calls Accept: the controller goroutine holds a conn it has
	// accepted but not handed out. Close must close it.
	fake := newFake(1)
	seq := &listenSeq{fakes: []net.Listener{fake}}
	l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
	require.NoError(t, err)

	// A conn already handed out belongs to the caller and survives Close.
	require.NoError(t, l.OpenAPI())
	agent := dial(t, l.APIAddr())
	s := mustAccept(t, l, listener.API)
	held := fake.givePipe(t)

	require.NoError(t, l.Close())
	assertClosedByPeer(t, held)
	assertEcho(t, s, agent)
	assert.True(t, fake.isClosed())
}

func TestConnAcceptedConcurrentlyWithCloseIsClosedNotLeaked(t *testing.T) {
	for i := range 50 {
		fake := newFake(1)
		seq := &listenSeq{fakes: []net.Listener{fake}}
		l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
		require.NoError(t, err)
		server, client := net.Pipe()
		fake.give(t, server, nil)

		accepted := acceptAsync(l)
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		r := <-accepted
		require.NoError(t, <-closed)

		if r.err == nil {
			// Handed out before Close began: the caller owns it.
			require.Equal(t, listener.Controller, listener.PortOf(r.c), "iteration %d", i)
			require.NoError(t, r.c.Close())
		} else {
			require.ErrorIs(t, r.err, net.ErrClosed, "iteration %d", i)
		}
		assertClosedByPeer(t, client)
		_ = client.Close()
		// Once Close has returned, Accept never hands out a connection.
		c, err := l.Accept()
		require.Nil(t, c)
		require.ErrorIs(t, err, net.ErrClosed)
	}
}

func TestConcurrentClose(t *testing.T) {
	l := newListener(t, listener.Config{BindAPIEarly: true})
	require.NoError(t, l.OpenAPI())
	pending := acceptAsync(l)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err := receive(t, pending)
	require.ErrorIs(t, err, net.ErrClosed)
	assert.True(t, l.Report().Closed)
	assert.False(t, l.Report().Controller.Open)
	assert.Nil(t, l.APIAddr())
}

func TestCloseUnblocksAcceptAndRefusesFurtherUse(t *testing.T) {
	l := newListener(t, listener.Config{})
	pending := acceptAsync(l)
	addr := l.Addr()
	require.NoError(t, l.Close())
	_, err := receive(t, pending)
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = l.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = net.DialTimeout("tcp", addr.String(), guard)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, l.CloseAPI())
}

func TestCloseBeforeOpenAPIBindsNothing(t *testing.T) {
	var apiBound bool
	seq := &listenSeq{}
	l, err := listener.NewWithListen(loopback(listener.Config{
		OnBound: func(p listener.Port, _ net.Addr) { apiBound = apiBound || p == listener.API },
	}), seq.listen)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	err = l.OpenAPI()
	require.ErrorIs(t, err, net.ErrClosed)
	assert.Equal(t, 1, seq.count(), "OpenAPI after Close must not bind")
	assert.False(t, apiBound)
	assert.Nil(t, l.APIAddr())
}

// blockingBind is an API-port bind that waits for the test to release it.
type blockingBind struct {
	entered, release chan struct{}
	ln               *fakeListener
}

// TestCloseWhileOpeningTheAPIPort: Close does not wait for a bind in
// flight, and the OpenAPI that made it, back from the bind, finds the
// listener closed: it releases the socket and logs nothing, calls no
// OnBound, whether the bind succeeded or failed. (Before, it logged
// "port bound" and called OnBound after Close had returned.)
func TestCloseWhileOpeningTheAPIPort(t *testing.T) {
	for _, bindErr := range []error{nil, syscall.EADDRINUSE} {
		t.Run(fmt.Sprint("bind error ", bindErr), func(t *testing.T) {
			bb := blockingBind{entered: make(chan struct{}), release: make(chan struct{}), ln: newFake(2)}
			calls := 0
			listen := func(network, addr string) (net.Listener, error) {
				calls++
				if calls == 1 {
					return net.Listen(network, addr)
				}
				close(bb.entered)
				<-bb.release
				if bindErr != nil {
					return nil, bindErr
				}
				return bb.ln, nil
			}
			h := logtest.New()
			var apiBound atomic.Int32
			l, err := listener.NewWithListen(loopback(listener.Config{Logger: h.Logger(),
				OnBound: func(p listener.Port, _ net.Addr) {
					if p == listener.API {
						apiBound.Add(1)
					}
				}}), listen)
			require.NoError(t, err)

			opened := make(chan error, 1)
			go func() { opened <- l.OpenAPI() }()
			<-bb.entered
			// Close does not wait for the bind in flight.
			require.NoError(t, l.Close())
			h.Seal(t)
			close(bb.release)

			select {
			case err := <-opened:
				require.ErrorIs(t, err, net.ErrClosed)
			case <-time.After(guard):
				t.Fatal("OpenAPI did not return")
			}
			if bindErr == nil {
				assert.True(t, bb.ln.isClosed(), "the socket bound during Close must be closed")
			}
			assert.Nil(t, l.APIAddr())
			assert.Zero(t, apiBound.Load(), "OnBound called after Close")
		})
	}
}

// TestCloseWhileOnBoundRuns: a Close made (from elsewhere) while OnBound
// runs for an OpenAPI does not wait for it — OnBound may be what Close
// waits behind — and that OpenAPI, back from OnBound, finds the listener
// closed: it releases the port and logs nothing more ("port opened").
func TestCloseWhileOnBoundRuns(t *testing.T) {
	h := logtest.New()
	inHook, release := make(chan struct{}), make(chan struct{})
	l := newListener(t, listener.Config{Logger: h.Logger(), OnBound: func(p listener.Port, _ net.Addr) {
		if p == listener.API {
			close(inHook)
			<-release
		}
	}})
	opened := make(chan error, 1)
	go func() { opened <- l.OpenAPI() }()
	waitClosed(t, inHook, "OnBound")
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(guard):
		close(release)
		t.Fatal("Close waited for OnBound")
	}
	h.Seal(t)
	close(release)
	select {
	case err := <-opened:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(guard):
		t.Fatal("OpenAPI did not return")
	}
	assert.Nil(t, l.APIAddr())
	for _, r := range h.Matching("port opened") {
		assert.Equal(t, "controller", r.Str("port"), "the API port opened after Close")
	}
}

// TestCloseWaitsForACloseAPIInFlight: a CloseAPI still releasing the API
// socket when Close is called logs its "port closed" before Close returns,
// not after. (Before, Close returned first, and the record came late.) It
// runs in a synctest bubble, so that "Close has returned" and "Close
// waits" are each observed, not guessed from timing.
func TestCloseWaitsForACloseAPIInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := logtest.New()
		ctrl := newFake(1)
		api := &slowCloseListener{fakeListener: newFake(2), release: make(chan struct{})}
		l, err := listener.NewWithListen(loopback(listener.Config{Logger: h.Logger()}),
			(&listenSeq{fakes: []net.Listener{ctrl, api}}).listen)
		require.NoError(t, err)
		require.NoError(t, l.OpenAPI())

		closedAPI := make(chan error, 1)
		go func() { closedAPI <- l.CloseAPI() }()
		synctest.Wait() // CloseAPI is in the API socket's Close

		closeReturned := make(chan struct{})
		go func() {
			assert.NoError(t, l.Close())
			close(closeReturned)
		}()
		synctest.Wait() // Close has returned, or waits for CloseAPI
		returned := isDone(closeReturned)
		if returned {
			h.Seal(t)
		}
		close(api.release)
		require.NoError(t, <-closedAPI)
		<-closeReturned
		if !returned {
			h.Seal(t)
		}
		assert.False(t, returned, "Close returned while CloseAPI was still releasing the API port")
		assert.Len(t, h.Matching("port closed"), 2, "%v", h.Records())
	})
}

// slowCloseListener is a fake whose Close stops its Accept at once but
// returns only when the test releases it, as a socket whose close is slow.
type slowCloseListener struct {
	*fakeListener
	release chan struct{}
}

func (s *slowCloseListener) Close() error {
	err := s.fakeListener.Close()
	<-s.release
	return err
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestCloseReleasesAnAPISocketThatWasNeverOpened(t *testing.T) {
	l := newListener(t, listener.Config{BindAPIEarly: true})
	addr := l.APIAddr().String()
	require.NoError(t, l.Close())
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the early-bound API socket is still held")
	require.NoError(t, ln.Close())
}

func TestAPIPortAlreadyInUse(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer squatter.Close()
	addr := squatter.Addr().String()

	t.Run("OpenAPI fails, the listener stays controller-only", func(t *testing.T) {
		l := newListener(t, listener.Config{APIAddr: addr})
		err := l.OpenAPI()
		require.ErrorIs(t, err, listener.ErrBind)
		require.ErrorIs(t, err, syscall.EADDRINUSE)
		var pe *listener.PortError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, listener.API, pe.Port)
		assert.Equal(t, addr, pe.Addr)
		assert.Nil(t, l.APIAddr())
		assert.False(t, l.Report().API.Open)

		dial(t, l.Addr())
		mustAccept(t, l, listener.Controller)
	})
	t.Run("BindAPIEarly fails New and releases the controller port", func(t *testing.T) {
		var ctrl net.Addr
		l, err := listener.New(loopback(listener.Config{
			APIAddr: addr, BindAPIEarly: true,
			OnBound: func(p listener.Port, a net.Addr) {
				if p == listener.Controller {
					ctrl = a
				}
			},
		}))
		require.Nil(t, l)
		require.ErrorIs(t, err, listener.ErrBind)
		require.ErrorIs(t, err, syscall.EADDRINUSE)
		require.NotNil(t, ctrl)
		ln, err := net.Listen("tcp", ctrl.String())
		require.NoError(t, err, "the controller port was not released")
		require.NoError(t, ln.Close())
	})
}

func TestAPIPortRetryAfterBindFailure(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := squatter.Addr().String()
	l := newListener(t, listener.Config{APIAddr: addr})
	require.ErrorIs(t, l.OpenAPI(), listener.ErrBind)
	require.NoError(t, squatter.Close())
	require.NoError(t, l.OpenAPI())
	assert.Equal(t, addr, l.APIAddr().String())
}

// emfile is what accept(2) reports when the process is out of descriptors.
var emfile = &net.OpError{Op: "accept", Net: "tcp", Err: &osSyscallError{syscall.EMFILE}}

type osSyscallError struct{ errno syscall.Errno }

func (e *osSyscallError) Error() string { return "accept4: " + e.errno.Error() }
func (e *osSyscallError) Unwrap() error { return e.errno }

func TestEMFILEStormOnOnePortLeavesTheOtherServing(t *testing.T) {
	for _, storm := range []listener.Port{listener.Controller, listener.API} {
		t.Run("storm on "+storm.String(), func(t *testing.T) {
			clk := testclock.NewClock(t0)
			fake := newFake(9)
			seq := &listenSeq{fakes: []net.Listener{nil, nil}}
			seq.fakes[storm-1] = fake // New binds the controller first, OpenAPI the API port
			l, err := listener.NewWithListen(loopback(listener.Config{Clock: clk}), seq.listen)
			require.NoError(t, err)
			defer l.Close()
			require.NoError(t, l.OpenAPI())
			other, otherAddr := listener.API, l.APIAddr()
			if storm == listener.API {
				other, otherAddr = listener.Controller, l.Addr()
			}
			acceptErr := acceptAsync(l)
			defer func() {
				require.NoError(t, l.Close())
				_, err := receive(t, acceptErr)
				require.ErrorIs(t, err, net.ErrClosed, "the storm must never end Accept")
			}()

			// step feeds one EMFILE and checks that the goroutine sleeps
			// exactly d on the clock before accepting again.
			step := func(d time.Duration) {
				t.Helper()
				fake.give(t, nil, emfile)
				require.NoError(t, clk.WaitAdvance(d-time.Millisecond, guard, 1))
				require.NoError(t, clk.WaitAdvance(time.Millisecond, guard, 1), "backoff shorter than %v", d)
			}
			step(5 * time.Millisecond)
			// Mid-storm, the other port serves.
			c := dial(t, otherAddr)
			r := <-acceptErr
			require.NoError(t, r.err)
			require.Equal(t, other, listener.PortOf(r.c))
			assertSamePeer(t, r.c, c)
			require.NoError(t, r.c.Close())
			acceptErr = acceptAsync(l)

			for _, d := range []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000} {
				step(d * time.Millisecond)
			}
			// The storm ends: a conn goes through and the backoff resets.
			client := fake.givePipe(t)
			r = <-acceptErr
			require.NoError(t, r.err)
			require.Equal(t, storm, listener.PortOf(r.c))
			require.NoError(t, r.c.Close())
			assertClosedByPeer(t, client)
			acceptErr = acceptAsync(l)
			step(5 * time.Millisecond)
			fake.give(t, nil, errTimeout{}) // a Timeout() error is temporary too
			require.NoError(t, clk.WaitAdvance(10*time.Millisecond, guard, 1))
			fake.givePipe(t)
			r = <-acceptErr
			require.NoError(t, r.err)
			require.NoError(t, r.c.Close())
			acceptErr = acceptAsync(l)

			rep := l.Report()
			ps := rep.Controller
			if storm == listener.API {
				ps = rep.API
			}
			assert.Equal(t, uint64(12), ps.TemporaryErrors)
			assert.Equal(t, errTimeout{}, ps.LastTemporaryError)
			assert.True(t, ps.Open)
			assert.NoError(t, rep.Err)
		})
	}
}

type errTimeout struct{}

func (errTimeout) Error() string { return "i/o timeout" }
func (errTimeout) Timeout() bool { return true }

func TestPermanentAcceptErrorFailsTheListenerLoudly(t *testing.T) {
	fake := newFake(1)
	seq := &listenSeq{fakes: []net.Listener{fake}}
	l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
	require.NoError(t, err)
	defer l.Close()
	boom := errors.New("boom: bad file descriptor")
	fake.give(t, nil, boom)

	_, err = l.Accept()
	require.ErrorIs(t, err, listener.ErrAcceptFailed)
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, net.ErrClosed)
	var pe *listener.PortError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, listener.Controller, pe.Port)
	_, again := l.Accept()
	require.Equal(t, err, again, "the failure is sticky")
	require.Equal(t, err, l.OpenAPI())
	rep := l.Report()
	require.Equal(t, err, rep.Err)
	assert.False(t, rep.Controller.Open)

	require.NoError(t, l.Close())
	_, err = l.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}

// A failure ends the API port too: its socket is released (agents are
// refused, not parked in an accept queue nobody drains), and the failure is
// what Accept, OpenAPI and Report say until Close.
func TestAFailureReleasesTheAPIPort(t *testing.T) {
	ctrl, api := newFake(1), newFake(2)
	seq := &listenSeq{fakes: []net.Listener{ctrl, api}}
	l, err := listener.NewWithListen(loopback(listener.Config{}), seq.listen)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.OpenAPI())
	boom := errors.New("boom: bad file descriptor")
	ctrl.give(t, nil, boom)
	_, err = l.Accept()
	require.ErrorIs(t, err, boom)

	assert.True(t, api.isClosed(), "the API socket is released")
	assert.Nil(t, l.APIAddr())
	rep := l.Report()
	assert.Equal(t, err, rep.Err)
	assert.False(t, rep.API.Open)
	require.Equal(t, err, l.OpenAPI())
	assert.Equal(t, 2, seq.count(), "OpenAPI after a failure binds nothing")
	require.NoError(t, l.CloseAPI())
	require.NoError(t, l.Close())
}

// A port that fails while OpenAPI is binding leaves no API accept loop
// behind: OpenAPI returns the failure and closes the socket it bound.
func TestFailureWhileOpeningTheAPIPort(t *testing.T) {
	ctrl := newFake(1)
	bb := blockingBind{entered: make(chan struct{}), release: make(chan struct{}), ln: newFake(2)}
	calls := 0
	listen := func(network, addr string) (net.Listener, error) {
		calls++
		if calls == 1 {
			return ctrl, nil
		}
		close(bb.entered)
		<-bb.release
		return bb.ln, nil
	}
	l, err := listener.NewWithListen(loopback(listener.Config{}), listen)
	require.NoError(t, err)
	defer l.Close()

	opened := make(chan error, 1)
	go func() { opened <- l.OpenAPI() }()
	<-bb.entered
	boom := errors.New("boom: bad file descriptor")
	ctrl.give(t, nil, boom)
	_, failure := l.Accept()
	require.ErrorIs(t, failure, boom)
	close(bb.release)

	select {
	case err := <-opened:
		require.Equal(t, failure, err)
	case <-time.After(guard):
		t.Fatal("OpenAPI did not return")
	}
	assert.True(t, bb.ln.isClosed(), "the socket bound during the failure must be closed")
	assert.Nil(t, l.APIAddr())
	assert.False(t, l.Report().API.Open)
}

func TestRateLimitingNeverDelaysControllerConns(t *testing.T) {
	clk := testclock.NewClock(t0) // never advanced: throttled agents stay throttled
	l := newListener(t, listener.Config{Clock: clk, APIRate: 1, APIBurst: 1})
	require.NoError(t, l.OpenAPI())
	for range 3 {
		dial(t, l.APIAddr())
	}
	mustAccept(t, l, listener.API) // the burst
	waitAlarm(t, clk)              // the API goroutine now waits for a token, holding agent 2

	for range 20 {
		c := dial(t, l.Addr())
		s := mustAccept(t, l, listener.Controller)
		assertSamePeer(t, s, c)
	}
	rep := l.Report()
	assert.Equal(t, uint64(20), rep.Controller.Accepted)
	assert.Equal(t, uint64(2), rep.API.Accepted)

	// One token later, the held agent is handed out.
	require.NoError(t, clk.WaitAdvance(time.Second, guard, 1))
	mustAccept(t, l, listener.API)
	assert.Equal(t, time.Second, l.Report().API.Throttled)
}

func TestBurstHonouredAfterIdle(t *testing.T) {
	clk := testclock.NewClock(t0)
	const burst = 3
	l := newListener(t, listener.Config{Clock: clk, APIRate: 10, APIBurst: burst})
	require.NoError(t, l.OpenAPI())

	round := func() {
		t.Helper()
		for range burst + 1 {
			dial(t, l.APIAddr())
		}
		// The burst goes through with the clock standing still...
		for range burst {
			mustAccept(t, l, listener.API)
		}
		// ...and the next agent waits exactly one token (100ms).
		pending := acceptAsync(l)
		require.NoError(t, clk.WaitAdvance(99*time.Millisecond, guard, 1))
		require.NoError(t, clk.WaitAdvance(time.Millisecond, guard, 1), "throttled for less than 1/rate")
		c, err := receive(t, pending)
		require.NoError(t, err)
		require.Equal(t, listener.API, listener.PortOf(c))
	}
	round()
	clk.Advance(time.Minute) // idle: the bucket refills to the burst, no further
	round()
	assert.Equal(t, 200*time.Millisecond, l.Report().API.Throttled)
}

func TestAPIMaxConnsReleasedOnceWhenAConnCloses(t *testing.T) {
	l := newListener(t, listener.Config{APIMaxConns: 1})
	require.NoError(t, l.OpenAPI())
	a := dial(t, l.APIAddr())
	sa := mustAccept(t, l, listener.API)
	assertSamePeer(t, sa, a)
	b := dial(t, l.APIAddr())

	pending := acceptAsync(l)
	select {
	case r := <-pending:
		t.Fatalf("Accept returned a second API conn over the cap: %v %v", r.c, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	// The controller port is not capped.
	dial(t, l.Addr())
	require.Equal(t, listener.Controller, listener.PortOf(must(t, pending)))

	require.NoError(t, sa.Close())
	require.Error(t, sa.Close()) // a second Close must not release a second slot (nor block)
	sb := mustAccept(t, l, listener.API)
	assertSamePeer(t, sb, b)
	rep := l.Report()
	assert.Equal(t, 1, rep.API.Conns)
	assert.Equal(t, uint64(2), rep.API.Accepted)

	// The cap is still one: a third agent waits for b.
	c := dial(t, l.APIAddr())
	pending = acceptAsync(l)
	select {
	case r := <-pending:
		t.Fatalf("cap over-released by a double Close: got %v %v", r.c, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, sb.Close())
	sc := must(t, pending)
	assertSamePeer(t, sc, c)
}

func must(t *testing.T, ch <-chan acceptResult) net.Conn {
	t.Helper()
	c, err := receive(t, ch)
	require.NoError(t, err)
	return c
}

func TestIPv4AndIPv6(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	require.NoError(t, probe.Close())

	for _, tt := range []struct{ name, ctrl, api string }{
		{"IPv4 controller, IPv6 API", "127.0.0.1:0", "[::1]:0"},
		{"IPv6 controller, IPv4 API", "[::1]:0", "127.0.0.1:0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newListener(t, listener.Config{ControllerAddr: tt.ctrl, APIAddr: tt.api})
			require.NoError(t, l.OpenAPI())
			c := dial(t, l.Addr())
			assertSamePeer(t, mustAccept(t, l, listener.Controller), c)
			a := dial(t, l.APIAddr())
			assertSamePeer(t, mustAccept(t, l, listener.API), a)
		})
	}
}

func TestPortOf(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	assert.Equal(t, listener.Port(0), listener.PortOf(nil))
	assert.Equal(t, listener.Port(0), listener.PortOf(server), "not ours")
}

func TestReportCountsConns(t *testing.T) {
	l := newListener(t, listener.Config{})
	require.NoError(t, l.OpenAPI())
	var conns []net.Conn
	for range 3 {
		dial(t, l.APIAddr())
		conns = append(conns, mustAccept(t, l, listener.API))
	}
	assert.Equal(t, 3, l.Report().API.Conns)
	require.NoError(t, conns[0].Close())
	require.Error(t, conns[0].Close())
	rep := l.Report()
	assert.Equal(t, 2, rep.API.Conns)
	assert.Equal(t, uint64(3), rep.API.Accepted)
	assert.True(t, rep.API.Open)
	assert.Equal(t, l.APIAddr(), rep.API.Addr)
	assert.Zero(t, rep.API.Throttled)
	assert.Nil(t, rep.API.LastTemporaryError)
}

func TestConnForwardsReadFromAndCloseWrite(t *testing.T) {
	l := newListener(t, listener.Config{})
	c := dial(t, l.Addr())
	s := mustAccept(t, l, listener.Controller)

	rf, ok := s.(io.ReaderFrom)
	require.True(t, ok, "the wrapper must keep the sendfile/splice path")
	n, err := rf.ReadFrom(strings.NewReader("hello"))
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	cw, ok := s.(interface{ CloseWrite() error })
	require.True(t, ok)
	require.NoError(t, cw.CloseWrite())

	require.NoError(t, c.SetReadDeadline(time.Now().Add(guard)))
	got, err := io.ReadAll(c) // ends at the half-close
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	assert.Equal(t, 1, l.Report().Controller.Conns, "CloseWrite does not release the conn")
}
