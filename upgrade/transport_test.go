package upgrade_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade"
)

// bodies records the body of every request a handler executed.
type bodies struct {
	mu  sync.Mutex
	got []string
}

func (b *bodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.got = append(b.got, string(body))
	b.mu.Unlock()
	_, _ = io.WriteString(w, "done")
}

func (b *bodies) executed() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got...)
}

// gatedServer is a real HTTP server behind the middleware; hits counts the
// requests that reached it, refused or not.
func gatedServer(t *testing.T, g *upgrade.Gate) (url string, h *bodies, hits *atomic.Int64) {
	h, hits = &bodies{}, &atomic.Int64{}
	guarded := upgrade.Middleware(g, nil)(h)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		guarded.ServeHTTP(w, r)
	}))
	return srv.URL, h, hits
}

// The glue every HTTP client wrote (Retry plus ErrorFromResponse around
// each call) is a transport: a POST refused twice while the steps run is
// sent again, body and all, after exactly each Retry-After, and executed
// once.
func TestRetryTransportWaitsAnUpgradeOut(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.NoError(t, g.SetRetryAfter(5*time.Second))
	url, h, hits := gatedServer(t, g)
	waits := make(chan time.Duration, 10)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(clk),
		upgrade.WithNotify(func(_ int, err error, wait time.Duration) {
			assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress)
			waits <- wait
		}))}
	defer client.CloseIdleConnections()

	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Post(url, "text/plain", strings.NewReader("deploy mysql"))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, string(body), err}
	}()
	for attempt := int64(1); attempt <= 2; attempt++ {
		wait := <-waits
		assert.True(t, wait >= 5*time.Second && wait <= 10*time.Second, "wait %v is not the server's Retry-After", wait)
		require.NoError(t, clk.WaitAdvance(wait-time.Nanosecond, waitTimeout, 1))
		assert.Equal(t, attempt, hits.Load(), "sent again before Retry-After")
		if attempt == 2 {
			g.Complete()
		}
		require.NoError(t, clk.WaitAdvance(time.Nanosecond, waitTimeout, 1))
	}
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "done", r.body)
	assert.Equal(t, int64(3), hits.Load())
	assert.Equal(t, []string{"deploy mysql"}, h.executed(), "executed once, with its whole body")
}

// onlyReader hides bytes.Reader's type, so http.NewRequest cannot set
// GetBody: the body can be sent once only.
type onlyReader struct{ io.Reader }

func TestRetryTransportReturnsARefusalItCannotReplay(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, h, hits := gatedServer(t, g)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(testclock.NewClock(t0)))}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, url, onlyReader{bytes.NewReader([]byte("once"))})
	require.NoError(t, err)
	require.Nil(t, req.GetBody)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	refusal := upgrade.ErrorFromResponse(resp)
	assert.ErrorIs(t, refusal, upgrade.ErrUpgradeInProgress, "the refusal comes back unread, for the caller to decode")
	assert.Equal(t, int64(1), hits.Load(), "not resent")
	assert.Empty(t, h.executed())
}

func TestRetryTransportStopsAtAFailedUpgrade(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("upgrade steps: disk full"))
	url, _, hits := gatedServer(t, g)
	client := &http.Client{Transport: upgrade.RetryTransport(nil)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.ErrorIs(t, upgrade.ErrorFromResponse(resp), upgrade.ErrUpgradeFailed)
	assert.Equal(t, int64(1), hits.Load())
}

func TestRetryTransportStopsWhenTheRequestsCtxEnds(t *testing.T) {
	clk := testclock.NewClock(t0)
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, h, hits := gatedServer(t, g)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(clk))}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.NoError(t, clk.WaitAdvance(0, waitTimeout, 1)) // waiting out the refusal
	cancel()
	err = <-done
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeInProgress, "the last refusal is kept")
	assert.ErrorContains(t, err, "after 1 attempt: ")
	assert.Equal(t, int64(1), hits.Load())
	assert.Empty(t, h.executed())
}

// A transport error is not a refusal: nothing says the request was not
// executed, so it is returned, not retried.
func TestRetryTransportDoesNotRetryTransportErrors(t *testing.T) {
	var calls atomic.Int64
	broken := roundTripper(func(*http.Request) (*http.Response, error) {
		calls.Add(1)
		return nil, errors.New("connection reset by peer")
	})
	client := &http.Client{Transport: upgrade.RetryTransport(broken)}
	_, err := client.Get("http://127.0.0.1:1/")
	assert.ErrorContains(t, err, "connection reset by peer")
	assert.Equal(t, int64(1), calls.Load())
}

// A body that cannot be had again (GetBody fails) ends the retry with the
// reason, and nothing is sent twice.
func TestRetryTransportGetBodyError(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	url, _, hits := gatedServer(t, g)
	clk := testclock.NewClock(t0)
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithClock(clk))}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spooled body gone") }
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.NoError(t, clk.WaitAdvance(2*time.Second, waitTimeout, 1))
	err = <-done
	assert.ErrorContains(t, err, "cannot resend POST")
	assert.ErrorContains(t, err, "spooled body gone")
	assert.Equal(t, int64(1), hits.Load())
}

func TestRetryTransportRejectsBadOptions(t *testing.T) {
	client := &http.Client{Transport: upgrade.RetryTransport(nil, upgrade.WithBackoff(0, 0))}
	_, err := client.Get("http://127.0.0.1:1/")
	assert.ErrorContains(t, err, "backoff base 0s (must be positive)")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
