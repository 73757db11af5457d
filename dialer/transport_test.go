package dialer_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
)

// httpServer is a real http.Server on loopback that answers /who with its
// name and holds /hold until release closes. It counts its connections.
type httpServer struct {
	name    string
	srv     *http.Server
	entered chan struct{} // one value per /hold request that arrived
	release chan struct{}

	mu     sync.Mutex
	open   int
	closed chan net.Conn // every connection that closed; buffered
	whos   int           // /who requests answered
}

func startHTTP(t *testing.T, name string, ln net.Listener) *httpServer {
	t.Helper()
	s := &httpServer{
		name: name, entered: make(chan struct{}, 16), release: make(chan struct{}),
		closed: make(chan net.Conn, 64),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/who", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.whos++
		s.mu.Unlock()
		io.WriteString(w, name)
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		io.WriteString(w, name+" held")
	})
	s.srv = &http.Server{Handler: mux, ConnState: func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.open++
		case http.StateClosed, http.StateHijacked:
			s.open--
			s.closed <- c
		}
	}}
	served := make(chan struct{})
	go func() { defer close(served); _ = s.srv.Serve(ln) }()
	t.Cleanup(func() {
		s.srv.Close()
		<-served
	})
	return s
}

func (s *httpServer) counts() (open, whos int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.whos
}

// waitClosedConns waits until n of the server's connections have closed.
func (s *httpServer) waitClosedConns(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.closed:
		case <-time.After(waitFor):
			open, _ := s.counts()
			t.Fatalf("%s: a connection did not close (%d open)", s.name, open)
		}
	}
}

func (s *httpServer) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(waitFor):
		t.Fatalf("%s: /hold did not arrive", s.name)
	}
}

type getResult struct {
	code int
	body string
	err  error
}

func getAsync(client *http.Client, url string) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		resp, err := client.Get(url)
		if err != nil {
			ch <- getResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- getResult{resp.StatusCode, string(b), err}
	}()
	return ch
}

func getResultOf(t *testing.T, ch <-chan getResult) getResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatal("the request did not return")
		return getResult{}
	}
}

func getBody(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	r := getResultOf(t, getAsync(client, url))
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	return r.body
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// The move with real servers: while the local server is not listening the
// requests go to a peer; when LocalReady closes, the idle peer connection
// closes at once, new requests go local, and the request in flight on the
// peer finishes there, after which its connection closes too.
func TestTransportMovesHomeWhenLocalReadyCloses(t *testing.T) {
	peerLn := listenLoopback(t)
	peer := startHTTP(t, "peer", peerLn)
	local := reserve(t) // not listening yet
	ready := make(chan struct{})
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Millisecond, // fall back to the peer at once
	})
	tr, err := dialer.NewTransport(d, nil)
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()
	const url = "http://controller/"

	assert.Equal(t, "peer", getBody(t, client, url+"who")) // conn A, now idle
	held := getAsync(client, url+"hold")                   // reuses A
	peer.waitEntered(t)
	assert.Equal(t, "peer", getBody(t, client, url+"who")) // conn B, now idle
	open, whos := peer.counts()
	require.Equal(t, 2, open)

	ln, err := local.listen()
	require.NoError(t, err)
	home := startHTTP(t, "local", ln)
	close(ready)

	peer.waitClosedConns(t, 1) // B, idle, closes without waiting for a request
	open, _ = peer.counts()
	assert.Equal(t, 1, open, "the connection busy with /hold must stay open")
	for range 3 {
		assert.Equal(t, "local", getBody(t, client, url+"who"))
	}
	close(peer.release)
	r := getResultOf(t, held)
	require.NoError(t, r.err, "the request in flight at the move failed")
	assert.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, "peer held", r.body)
	peer.waitClosedConns(t, 1) // A, once its last request ended
	open, whosAfter := peer.counts()
	assert.Equal(t, 0, open)
	assert.Equal(t, whos, whosAfter, "a request sent after the move reached the peer")
	_, homeWhos := home.counts()
	assert.Equal(t, 3, homeWhos)
}

// A request that is still waiting for its connection (the Dialer waits out
// LocalReadyGrace for a local server that is not listening) when
// LocalReady closes is served locally, and no peer is dialled.
func TestTransportRequestWaitingForTheLocalServerGoesLocal(t *testing.T) {
	peerLn := listenLoopback(t)
	peer := startHTTP(t, "peer", peerLn)
	local := reserve(t)
	ready := make(chan struct{})
	clk := newClock()
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Hour,
		Clock:           clk,
	})
	tr, err := dialer.NewTransport(d, nil)
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	res := getAsync(client, "http://controller/who")
	require.NoError(t, clk.WaitAdvance(0, waitFor, 1)) // the Dial waits out its grace
	ln, err := local.listen()
	require.NoError(t, err)
	startHTTP(t, "local", ln)
	close(ready)
	r := getResultOf(t, res)
	require.NoError(t, r.err)
	assert.Equal(t, "local", r.body)
	assert.Equal(t, "local", getBody(t, client, "http://controller/who"))
	open, whos := peer.counts()
	assert.Equal(t, 0, open+whos, "the peer was dialled")
}

// With LocalReady closed from the start there is no move to make: one
// pool, local connections only.
func TestTransportWithLocalAlreadyReady(t *testing.T) {
	ln := listenLoopback(t)
	home := startHTTP(t, "local", ln)
	ready := make(chan struct{})
	close(ready)
	d := mustNew(t, dialer.Config{LocalPort: ln.Addr().(*net.TCPAddr).Port, LocalReady: ready})
	tr, err := dialer.NewTransport(d, &http.Transport{})
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()
	for range 2 {
		assert.Equal(t, "local", getBody(t, client, "http://controller/who"))
	}
	open, _ := home.counts()
	assert.Equal(t, 1, open, "the connection is reused")
}

func TestNewTransportRejectsABadDialer(t *testing.T) {
	for _, d := range []*dialer.Dialer{nil, {}} {
		_, err := dialer.NewTransport(d, nil)
		require.ErrorIs(t, err, errors.NotValid)
	}
}

// A request whose ctx ends while the local server refuses returns ctx's
// error (http.Transport reports the request's ending, not the dial's), and
// its Dial, which never falls back to a peer, is cancelled with it: goleak
// would catch one still retrying.
func TestTransportGivesUpWithTheRequestContext(t *testing.T) {
	local := reserve(t)
	ready := make(chan struct{})
	close(ready)
	d := mustNew(t, dialer.Config{LocalPort: local.port, LocalReady: ready, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	tr, err := dialer.NewTransport(d, nil)
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://controller/who", nil)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// An upgraded connection to a peer (a websocket, say) is a request that
// lasts: the move leaves it working, and closes nothing under it.
func TestTransportLeavesAnUpgradedPeerConnectionAlone(t *testing.T) {
	peerLn := listenLoopback(t)
	peer := startHTTP(t, "peer", peerLn)
	ended := make(chan struct{})
	peer.srv.Handler.(*http.ServeMux).HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer close(ended)
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		buf := make([]byte, 64)
		for {
			n, err := rw.Read(buf)
			if err != nil {
				return
			}
			rw.Write(buf[:n])
			rw.Flush()
		}
	})
	local := reserve(t)
	ready := make(chan struct{})
	d := mustNew(t, dialer.Config{
		LocalPort:       local.port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      ready,
		LocalReadyGrace: time.Millisecond,
	})
	tr, err := dialer.NewTransport(d, nil)
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	req, err := http.NewRequest(http.MethodGet, "http://controller/upgrade", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	ws, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the body of a 101 must stay writable")
	echo := func(msg string) {
		t.Helper()
		_, err := io.WriteString(ws, msg)
		require.NoError(t, err)
		buf := make([]byte, len(msg))
		_, err = io.ReadFull(ws, buf)
		require.NoError(t, err)
		require.Equal(t, msg, string(buf))
	}
	echo("before")

	ln, err := local.listen()
	require.NoError(t, err)
	startHTTP(t, "local", ln)
	close(ready)
	assert.Equal(t, "local", getBody(t, client, "http://controller/who"))
	echo("after the move")
	select {
	case <-ended:
		t.Fatal("the upgraded connection was closed by the move")
	default:
	}
	require.NoError(t, ws.Close())
	select {
	case <-ended:
	case <-time.After(waitFor):
		t.Fatal("closing the upgraded body did not close the connection")
	}
}
