package listener_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/listener"
)

// loginHandler answers with the port a request came in on and refuses
// agent logins on the controller port, as a controller's API server would.
func loginHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/port", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, listener.PortFromContext(r.Context()))
	})
	mux.HandleFunc("/agent-login", func(w http.ResponseWriter, r *http.Request) {
		if listener.PortFromContext(r.Context()) != listener.API {
			http.Error(w, "agents log in on the API port", http.StatusForbidden)
			return
		}
		fmt.Fprint(w, "welcome")
	})
	return mux
}

// serve runs srv on l with serveFn and returns a func that shuts it down
// and checks that Serve ended with http.ErrServerClosed, promptly.
func serve(t *testing.T, srv *http.Server, serveFn func() error) (shutdown func()) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- serveFn() }()
	return func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx), "Shutdown was not prompt")
		select {
		case err := <-served:
			require.ErrorIs(t, err, http.ErrServerClosed)
		case <-time.After(guard):
			t.Fatal("Serve did not return after Shutdown")
		}
	}
}

func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestHTTPServerServe(t *testing.T) {
	l := newListener(t, listener.Config{APIRate: 1000})
	srv := &http.Server{Handler: loginHandler(), ConnContext: listener.ConnContext}
	shutdown := serve(t, srv, func() error { return srv.Serve(l) })
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	// Serve keeps running while the API port is closed: Accept blocks.
	ctrl := "http://" + l.Addr().String()
	code, body := get(t, client, ctrl+"/port")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "controller", body)
	code, _ = get(t, client, ctrl+"/agent-login")
	require.Equal(t, http.StatusForbidden, code)

	require.NoError(t, l.OpenAPI())
	api := "http://" + l.APIAddr().String()
	code, body = get(t, client, api+"/agent-login")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "welcome", body)
	_, body = get(t, client, api+"/port")
	require.Equal(t, "api", body)

	// The keep-alive conns stay open until Shutdown closes them.
	shutdown()
	require.True(t, l.Report().Closed)
	_, err := l.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}

func TestHTTPServerServeTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	l := newListener(t, listener.Config{})
	require.NoError(t, l.OpenAPI())
	srv := &http.Server{
		Handler:     loginHandler(),
		ConnContext: listener.ConnContext, // sees a *tls.Conn: PortOf unwraps it
		TLSConfig:   &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	shutdown := serve(t, srv, func() error { return srv.ServeTLS(l, "", "") })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	_, body := get(t, client, "https://"+l.Addr().String()+"/port")
	require.Equal(t, "controller", body)
	_, body = get(t, client, "https://"+l.APIAddr().String()+"/port")
	require.Equal(t, "api", body)
	shutdown()
}

func TestHTTPServerShutdownIsPromptWithAPIPortClosedAndThrottled(t *testing.T) {
	// Serve is blocked in Accept with nothing to accept: the API port
	// was never opened. A second listener has a throttled agent held.
	l := newListener(t, listener.Config{})
	srv := &http.Server{Handler: loginHandler()}
	serve(t, srv, func() error { return srv.Serve(l) })()

	held := newListener(t, listener.Config{APIRate: 0.001, APIBurst: 1})
	require.NoError(t, held.OpenAPI())
	a, b := dial(t, held.APIAddr()), dial(t, held.APIAddr())
	srv2 := &http.Server{Handler: loginHandler()}
	shutdown := serve(t, srv2, func() error { return srv2.Serve(held) })
	_, err := a.Write([]byte("GET /port HTTP/1.0\r\n\r\n"))
	require.NoError(t, err)
	resp, err := io.ReadAll(a)
	require.NoError(t, err)
	require.Contains(t, string(resp), "200 OK")
	shutdown()
	assertClosedByPeer(t, b) // the agent held by the limiter is closed, not leaked
}

func TestPortOfSeesThroughTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	l := newListener(t, listener.Config{})
	tl := tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
	done := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool})
		if err == nil {
			err = c.Close()
		}
		done <- err
	}()
	c, err := tl.Accept()
	require.NoError(t, err)
	defer c.Close()
	require.IsType(t, &tls.Conn{}, c)
	require.Equal(t, listener.Controller, listener.PortOf(c))
	require.NoError(t, c.(*tls.Conn).Handshake())
	require.NoError(t, <-done)
}

// selfSigned makes a throwaway certificate for 127.0.0.1 and ::1.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "coldstart test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// The listener closes last in a drain: http.Server.Shutdown closes it,
// which stops both ports accepting, and the requests in flight on
// connections it accepted run to completion.
func TestShutdownLetsRequestsInFlightFinish(t *testing.T) {
	l := newListener(t, listener.Config{})
	require.NoError(t, l.OpenAPI())
	inside, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-release
		fmt.Fprint(w, "finished")
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + l.APIAddr().String() + "/")
		if err != nil {
			answered <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		answered <- string(body)
	}()
	<-inside
	apiAddr, ctrlAddr := l.APIAddr().String(), l.Addr().String()

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-served: // Serve returns once the listener is closed
		require.ErrorIs(t, err, http.ErrServerClosed)
	case <-time.After(guard):
		t.Fatal("Serve did not return after Shutdown")
	}
	for _, addr := range []string{apiAddr, ctrlAddr} {
		c, err := net.DialTimeout("tcp", addr, guard)
		if err == nil {
			_ = c.Close()
		}
		require.Error(t, err, "%s still accepts", addr)
	}
	close(release)
	require.Equal(t, "finished", <-answered, "the request in flight finished")
	require.NoError(t, <-shut)
}
