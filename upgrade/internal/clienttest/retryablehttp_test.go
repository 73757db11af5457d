package clienttest_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade"
)

// server runs handler behind upgrade.Middleware(g) on loopback and counts
// the requests that reached it (refused or not).
func server(t *testing.T, g *upgrade.Gate, handler http.Handler, afterRefusal func()) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	mw := upgrade.Middleware(g, nil)(handler)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		rec := &statusRecorder{ResponseWriter: w}
		mw.ServeHTTP(rec, r)
		if rec.status != http.StatusOK && afterRefusal != nil {
			afterRefusal()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// newClient is go-retryablehttp with its default policy (4 retries, 1–30 s
// backoff, Retry-After honoured on 429 and 503), quiet.
func newClient(t *testing.T) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.Logger = nil
	t.Cleanup(c.HTTPClient.CloseIdleConnections)
	return c
}

// TestRetryableHTTPStopsAtOnceOnAFailedUpgrade: round 1 answered a failed
// upgrade with 503, and go-retryablehttp retried it 5 times over 15 s before
// "giving up" with no cause. A 409 is not retried: one request, and the
// caller has the response that names the cause.
func TestRetryableHTTPStopsAtOnceOnAFailedUpgrade(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("upgrade step 7 (migrate leases): disk full"))
	executed := 0
	srv, hits := server(t, g, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { executed++ }), nil)

	start := time.Now()
	resp, err := newClient(t).Post(srv.URL+"/deploy", "application/json", strings.NewReader(`{"charm":"x"}`))
	require.NoError(t, err, "the client hands the failure back as a response")
	defer resp.Body.Close()
	assert.Less(t, time.Since(start), time.Second, "no retry wait")
	assert.Equal(t, int64(1), hits.Load(), "exactly one request")
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	err = upgrade.ErrorFromResponse(resp)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.EqualError(t, err, "upgrade failed: upgrade step 7 (migrate leases): disk full; call not executed")
	assert.Zero(t, executed)
}

// TestRetryableHTTPWaitsOutAnUpgrade: during an upgrade the client sleeps
// the Retry-After it is told (1–2 s at the default R of 1 s: the one real
// wait in this suite) and the request, body intact, is executed once.
func TestRetryableHTTPWaitsOutAnUpgrade(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	payload := []byte(`{"charm":"postgresql","units":3}`)
	var executed atomic.Int64
	srv, hits := server(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executed.Add(1)
		body, _ := io.ReadAll(r.Body)
		assert.Equal(t, payload, body, "the retried request's body is intact")
	}), g.Complete) // the upgrade completes just after the first refusal

	start := time.Now()
	resp, err := newClient(t).Post(srv.URL+"/deploy", "application/json", bytes.NewReader(payload))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(2), hits.Load(), "refused once, then served")
	assert.Equal(t, int64(1), executed.Load(), "executed once")
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "waited at least Retry-After")
}

// TestHerdSpreads: 20 go-retryablehttp clients refused together come back
// when their Retry-After says (its DefaultBackoff sleeps exactly that on a
// 503). Round 1 told them all the same number, and they came back within
// 1–4 ms of each other, every round. Now each refusal draws from [R, 2R]:
// at R = 4 s no 100 ms window holds more than 60 % of the second attempts,
// and at the default R = 1 s the herd splits (no window holds 19 of 20).
// The clients' sleeps are computed with go-retryablehttp's own backoff from
// the real responses rather than slept. (Odds of a false failure: below
// 1e-4 per run, the chance that independent draws fall that unevenly.)
func TestHerdSpreads(t *testing.T) {
	for _, tc := range []struct {
		retryAfter time.Duration
		maxInOne   int // of 20, in any 100 ms window
	}{
		{4 * time.Second, 12},
		{time.Second, 18},
	} {
		t.Run(tc.retryAfter.String(), func(t *testing.T) {
			g := upgrade.NewGate(upgrade.GateConfig{})
			require.NoError(t, g.SetRetryAfter(tc.retryAfter))
			srv, _ := server(t, g, http.NotFoundHandler(), nil)
			client := newClient(t)

			const herd = 20
			sleeps := make([]time.Duration, herd)
			var wg sync.WaitGroup
			for i := range herd {
				wg.Go(func() {
					resp, err := client.HTTPClient.Post(srv.URL+"/deploy", "application/json", nil)
					if !assert.NoError(t, err) {
						return
					}
					defer resp.Body.Close()
					assert.ErrorIs(t, upgrade.ErrorFromResponse(resp), upgrade.ErrUpgradeInProgress)
					sleeps[i] = retryablehttp.DefaultBackoff(client.RetryWaitMin, client.RetryWaitMax, 0, resp)
				})
			}
			wg.Wait()
			for _, s := range sleeps {
				assert.True(t, s >= tc.retryAfter && s <= 2*tc.retryAfter, "sleep %v not in [R, 2R]", s)
			}
			crowd := busiestWindow(sleeps, 100*time.Millisecond)
			assert.LessOrEqual(t, crowd, tc.maxInOne, "%d of %d second attempts in one 100 ms window: %v", crowd, herd, sleeps)
		})
	}
}

// busiestWindow is the most values that fall in any window of width w.
func busiestWindow(ds []time.Duration, w time.Duration) int {
	s := slices.Sorted(slices.Values(ds))
	most := 0
	for i := range s {
		j := i
		for j < len(s) && s[j]-s[i] < w {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

func TestBusiestWindow(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	assert.Equal(t, 3, busiestWindow(ms(1000, 1001, 1004, 2000), 100*time.Millisecond))
	assert.Equal(t, 1, busiestWindow(ms(1000, 1100, 1200), 100*time.Millisecond))
	assert.Equal(t, 2, busiestWindow(ms(1000, 1099, 1198), 100*time.Millisecond))
	assert.Equal(t, 0, busiestWindow(nil, time.Second))
}
