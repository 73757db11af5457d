package upgrade_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// served is a handler that counts what it executed.
type served struct{ n atomic.Int64 }

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	_, _ = io.WriteString(w, "done")
}

func serve(h http.Handler, method, path string) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func decodeBody(t *testing.T, resp *http.Response) map[string]string {
	t.Helper()
	var body map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return body
}

func TestMiddlewareRefusesWith503RetryAfterAndJSON(t *testing.T) {
	for _, tc := range []struct {
		phase      upgrade.Phase
		retryAfter time.Duration
		lo, hi     int // Retry-After, whole seconds
	}{
		{upgrade.PhaseChecking, time.Second, 1, 2},
		{upgrade.PhaseRunningSteps, 1500 * time.Millisecond, 2, 3}, // rounded up: never earlier than asked
		{upgrade.PhaseRunningSteps, 200 * time.Millisecond, 1, 1},  // whole seconds, at least 1
		{upgrade.PhaseChecking, 90 * time.Second, 90, 180},
		{upgrade.PhaseChecking, time.Hour, 3600, 7200}, // too wide to precompute: formatted per refusal
	} {
		t.Run(fmt.Sprint(tc.phase, tc.retryAfter), func(t *testing.T) {
			g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
			require.NoError(t, g.SetRetryAfter(tc.retryAfter))
			require.NoError(t, g.Enter(tc.phase))
			h := &served{}
			resp := serve(upgrade.Middleware(g, nil)(h), "POST", "/deploy")

			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			assert.True(t, ra >= tc.lo && ra <= tc.hi, "Retry-After %d not in [%d, %d]", ra, tc.lo, tc.hi)
			assert.Equal(t, upgrade.Code, resp.Header.Get(upgrade.HeaderCode))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			body := decodeBody(t, resp)
			assert.Equal(t, upgrade.Code, body["code"])
			assert.Equal(t, tc.phase.String(), body["phase"])
			assert.Contains(t, body["message"], "not executed")
			assert.Zero(t, h.n.Load(), "a refused request never reaches the handler")
		})
	}
}

// TestRetryAfterIsDrawnPerRefusal: generic clients sleep exactly the
// Retry-After they are told, so each refusal gets its own, drawn from
// [R, 2R] whole seconds; the spread follows SetRetryAfter.
func TestRetryAfterIsDrawnPerRefusal(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	h := upgrade.Middleware(g, nil)(&served{})
	draw := func() map[string]int {
		seen := map[string]int{}
		for range 500 {
			seen[serve(h, "GET", "/").Header.Get("Retry-After")]++
		}
		return seen
	}
	seen := draw()
	assert.Len(t, seen, 2, "default R = 1 s: 1 or 2, %v", seen)
	assert.Positive(t, seen["1"])
	assert.Positive(t, seen["2"])

	require.NoError(t, g.SetRetryAfter(4*time.Second))
	seen = draw()
	assert.Len(t, seen, 5, "R = 4 s: every value in [4, 8], %v", seen)
	for s := 4; s <= 8; s++ {
		assert.Positive(t, seen[strconv.Itoa(s)], "%d s never drawn", s)
	}
}

func TestMiddlewareServesAllowlistedCallsDuringUpgrade(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	h := &served{}
	mw := upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(h)

	resp := serve(mw, "GET", "/status")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(1), h.n.Load())

	resp = serve(mw, "GET", "/deploy")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, int64(1), h.n.Load())
}

func TestMiddlewareServesAllOnceCompleteAndRefusesAgainAfterEnter(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	h := &served{}
	mw := upgrade.Middleware(g, nil)(h)
	g.Complete()
	assert.Equal(t, http.StatusOK, serve(mw, "POST", "/deploy").StatusCode)
	require.NoError(t, g.Enter(upgrade.PhaseChecking))
	assert.Equal(t, http.StatusServiceUnavailable, serve(mw, "POST", "/deploy").StatusCode)
	assert.Equal(t, int64(1), h.n.Load())
}

func TestMiddlewarePanicsOnNilGate(t *testing.T) {
	assert.PanicsWithValue(t, "upgrade.Middleware: nil Gate", func() { upgrade.Middleware(nil, nil) })
	assert.PanicsWithValue(t, "upgrade.ReadyHandler: nil Gate", func() { upgrade.ReadyHandler(nil) })
}

// TestFailedUpgradeAnswers409WithoutRetryAfter: a failed upgrade must stop
// generic retrying clients at once, so it is a 4xx they do not retry (a 503
// kept them retrying for 15–31 s), and the cause is said once.
func TestFailedUpgradeAnswers409WithoutRetryAfter(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	g.Fail(errors.New("upgrade step 7 (migrate leases): disk full"))
	h := &served{}
	resp := serve(upgrade.Middleware(g, nil)(h), "POST", "/deploy")

	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("Retry-After"), "clients must stop, not retry")
	assert.Equal(t, upgrade.CodeFailed, resp.Header.Get(upgrade.HeaderCode))
	err := upgrade.ErrorFromResponse(resp)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	assert.NotErrorIs(t, err, upgrade.ErrUpgradeInProgress)
	assert.ErrorContains(t, err, "disk full", "the operator sees the cause")
	assert.EqualError(t, err, "upgrade failed: upgrade step 7 (migrate leases): disk full; call not executed", "the cause, once")
	body := decodeBody(t, resp) // the body is still readable after ErrorFromResponse
	assert.Equal(t, upgrade.CodeFailed, body["code"])
	assert.Equal(t, "failed", body["phase"])
	assert.Equal(t, "upgrade step 7 (migrate leases): disk full", body["cause"])
	assert.Equal(t, err.Error(), body["message"])
	assert.Zero(t, h.n.Load())
}

// The incident: an upgrade step's error of a megabyte was sent whole in
// every refusal, and a client, which reads 4 KiB of a refusal, could not
// parse it and said "the server gave no cause". A refusal says the cause
// on one line, cut at 1 KiB, and fits what a client reads.
func TestFailedRefusalCarriesABoundedCause(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	g.Fail(errors.New("step 7: disk full\n[+]forged ok\n" + strings.Repeat("x", 1<<20)))
	resp := serve(upgrade.Middleware(g, nil)(&served{}), "POST", "/deploy")

	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Less(t, len(raw), 4<<10, "the whole refusal is within what a client reads")
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	err = upgrade.ErrorFromResponse(resp)
	var failed *upgrade.FailedError
	require.ErrorAs(t, err, &failed)
	cause := failed.Err.Error()
	assert.True(t, strings.HasPrefix(cause, "step 7: disk full␊[+]forged ok␊xxx"), "%.80q", cause)
	assert.True(t, strings.HasSuffix(cause, "x…"), "cut, and says so: %.80q", cause[len(cause)-20:])
	assert.LessOrEqual(t, len(cause), 1024)
	assert.NotContains(t, err.Error(), "\n")
}

func TestMiddlewareRefusalRoundTripsThroughErrorFromResponse(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	require.NoError(t, g.SetRetryAfter(4*time.Second))
	require.NoError(t, g.Enter(upgrade.PhaseRunningSteps))
	srv := httptest.NewServer(upgrade.Middleware(g, nil)(&served{}))
	defer srv.Close()

	for _, method := range []string{"GET", "POST", "HEAD"} { // HEAD: no body, the header still says who refused
		req, err := http.NewRequest(method, srv.URL+"/x", nil)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		err = upgrade.ErrorFromResponse(resp)
		_ = resp.Body.Close()
		var ip *upgrade.InProgressError
		require.ErrorAs(t, err, &ip, method)
		assert.True(t, ip.RetryAfter() >= 4*time.Second && ip.RetryAfter() <= 8*time.Second, "%s: RetryAfter %v not in [4s, 8s]", method, ip.RetryAfter())
		if method != "HEAD" {
			assert.Equal(t, upgrade.PhaseRunningSteps, ip.Phase, method)
		}
	}
}

func TestReadyHandler(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	rh := upgrade.ReadyHandler(g)
	behind := upgrade.Middleware(g, nil)(rh) // mounted behind the middleware it answers the same

	for _, h := range []http.Handler{rh, behind} {
		resp := serve(h, "GET", "/ready")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.ErrorIs(t, upgrade.ErrorFromResponse(resp), upgrade.ErrUpgradeInProgress)
	}
	g.Complete()
	for _, h := range []http.Handler{rh, behind} {
		resp := serve(h, "GET", "/ready")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.NoError(t, upgrade.ErrorFromResponse(resp))
		assert.Equal(t, map[string]string{"phase": "complete"}, decodeBody(t, resp))
	}
}

// trackingBody records whether it was read or closed.
type trackingBody struct {
	io.Reader
	read, closed bool
}

func (b *trackingBody) Read(p []byte) (int, error) { b.read = true; return b.Reader.Read(p) }
func (b *trackingBody) Close() error               { b.closed = true; return nil }

func TestErrorFromResponse(t *testing.T) {
	ours := `{"code":"upgrade-in-progress","phase":"running-steps","message":"upgrade in progress"}`
	// A round-1 server: a 503, no cause, the message a FailedError's text.
	failed := `{"code":"upgrade-failed","phase":"failed","message":"upgrade failed: step 3: no space; call not executed"}`
	failed409 := `{"code":"upgrade-failed","phase":"failed","message":"upgrade failed: step 3: no space; call not executed","cause":"step 3: no space"}`
	type want struct {
		is         error // nil: not a refusal
		phase      upgrade.Phase
		retryAfter time.Duration
		contains   string
	}
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   want
	}{
		{"200 is never a refusal", 200, map[string]string{upgrade.HeaderCode: upgrade.Code}, ours, want{}},
		{"500 with our body is not a refusal", 500, map[string]string{"Content-Type": "application/json"}, ours, want{}},
		{"ours, header and body", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "3", "Content-Type": "application/json"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 3 * time.Second, ""}},
		{"ours, body only (a proxy dropped the header)", 503, map[string]string{"Content-Type": "application/json; charset=utf-8", "Retry-After": "2"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 2 * time.Second, ""}},
		{"ours, malformed body", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "5"}, `{"code":"upgr`,
			want{upgrade.ErrUpgradeInProgress, 0, 5 * time.Second, ""}},
		{"ours, unknown phase", 503, map[string]string{upgrade.HeaderCode: upgrade.Code}, `{"code":"upgrade-in-progress","phase":"defragmenting"}`,
			want{upgrade.ErrUpgradeInProgress, 0, 0, ""}},
		{"missing Retry-After", 503, map[string]string{upgrade.HeaderCode: upgrade.Code}, ours, want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 0, ""}},
		{"garbage Retry-After", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "soon"}, ours, want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 0, ""}},
		{"negative Retry-After", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "-4"}, ours, want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 0, ""}},
		// A wait of more than an hour is read as an hour: a proxy's
		// "forever" (4294967295) parks no client for 136 years.
		{"huge Retry-After is an hour", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "99999999999999"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, upgrade.MaxRetryAfter, ""}},
		{"Retry-After beyond uint64 is an hour too, not no hint", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "99999999999999999999"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, upgrade.MaxRetryAfter, ""}},
		{"an hour and a second is an hour", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "3601"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, upgrade.MaxRetryAfter, ""}},
		{"an hour is kept", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "3600"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, time.Hour, ""}},
		{"digits with a sign are garbage", 503, map[string]string{upgrade.HeaderCode: upgrade.Code, "Retry-After": "+5"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 0, ""}},
		{"HTTP-date a year on is an hour", 503, map[string]string{upgrade.HeaderCode: upgrade.Code,
			"Date": "Mon, 30 Nov 2026 01:00:00 GMT", "Retry-After": "Tue, 30 Nov 2027 01:00:00 GMT"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, upgrade.MaxRetryAfter, ""}},
		{"HTTP-date Retry-After, relative to Date", 503, map[string]string{upgrade.HeaderCode: upgrade.Code,
			"Date": "Mon, 30 Nov 2026 01:00:00 GMT", "Retry-After": "Mon, 30 Nov 2026 01:00:30 GMT"}, ours,
			want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 30 * time.Second, ""}},
		{"HTTP-date Retry-After without Date", 503, map[string]string{upgrade.HeaderCode: upgrade.Code,
			"Retry-After": "Mon, 30 Nov 2026 01:00:30 GMT"}, ours, want{upgrade.ErrUpgradeInProgress, upgrade.PhaseRunningSteps, 0, ""}},
		{"failed", 503, map[string]string{upgrade.HeaderCode: upgrade.CodeFailed, "Content-Type": "application/json"}, failed,
			want{upgrade.ErrUpgradeFailed, 0, 0, "step 3: no space"}},
		{"failed, no body", 503, map[string]string{upgrade.HeaderCode: upgrade.CodeFailed}, "", want{upgrade.ErrUpgradeFailed, 0, 0, "no cause"}},
		{"failed, 409 with cause", 409, map[string]string{upgrade.HeaderCode: upgrade.CodeFailed, "Content-Type": "application/json"}, failed409,
			want{upgrade.ErrUpgradeFailed, 0, 0, "upgrade failed: step 3: no space; call not executed"}},
		{"failed, 409 body only", 409, map[string]string{"Content-Type": "application/json"}, failed409,
			want{upgrade.ErrUpgradeFailed, 0, 0, "upgrade failed: step 3: no space; call not executed"}},
		{"409 from something else", 409, map[string]string{"Content-Type": "application/json"}, `{"error":"version conflict"}`, want{}},
		{"409 with our in-progress code is not ours", 409, map[string]string{upgrade.HeaderCode: upgrade.Code, "Content-Type": "application/json"}, ours, want{}},
		{"409 with our in-progress body is not ours", 409, map[string]string{"Content-Type": "application/json"}, ours, want{}},
		{"proxy 503 with HTML", 503, map[string]string{"Content-Type": "text/html", "Retry-After": "10"}, "<html>Service Unavailable</html>", want{}},
		{"proxy 503 with other JSON", 503, map[string]string{"Content-Type": "application/json"}, `{"error":"no healthy upstream"}`, want{}},
		{"proxy 503 with JSON that is not an object", 503, map[string]string{"Content-Type": "application/json"}, `[1,2,3]`, want{}},
		{"unknown code in our header", 503, map[string]string{upgrade.HeaderCode: "maintenance"}, ours, want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &trackingBody{Reader: strings.NewReader(tc.body)}
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}, Body: body}
			for k, v := range tc.header {
				resp.Header.Set(k, v)
			}
			err := upgrade.ErrorFromResponse(resp)
			if tc.want.is == nil {
				assert.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want.is)
				var ip *upgrade.InProgressError
				if errors.As(err, &ip) {
					assert.Equal(t, tc.want.phase, ip.Phase)
					assert.Equal(t, tc.want.retryAfter, ip.RetryAfter())
				}
				assert.ErrorContains(t, err, tc.want.contains)
				if errors.Is(err, upgrade.ErrUpgradeFailed) {
					assert.Equal(t, 1, strings.Count(err.Error(), "upgrade failed"), "the cause is named once: %v", err)
					assert.Equal(t, 1, strings.Count(err.Error(), "call not executed"), "%v", err)
				}
			}
			if tc.status != 503 && tc.status != 409 {
				assert.False(t, body.read, "a body that cannot be a refusal is not touched")
			}
			rest, rerr := io.ReadAll(resp.Body)
			require.NoError(t, rerr)
			assert.Equal(t, tc.body, string(rest), "the caller can still read the whole body")
			assert.False(t, body.closed, "ErrorFromResponse never closes the body")
			require.NoError(t, resp.Body.Close())
			assert.True(t, body.closed, "closing the replayed body closes the original")
		})
	}
	assert.NoError(t, upgrade.ErrorFromResponse(nil))
	assert.NoError(t, upgrade.ErrorFromResponse(&http.Response{StatusCode: 503, Header: http.Header{}}), "nil body, no header")
}

func TestErrorFromResponseReadsALargeBodyOnlyInPart(t *testing.T) {
	big := `{"code":"upgrade-in-progress","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	body := &countingReader{r: strings.NewReader(big)}
	resp := &http.Response{StatusCode: 503, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(body)}
	assert.NoError(t, upgrade.ErrorFromResponse(resp), "the code is beyond what we read; a truncated object decodes to nothing")
	assert.LessOrEqual(t, body.n, 8<<10)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, big, string(rest))
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestErrorFromResponsePassesOnABodyReadError(t *testing.T) {
	boom := errors.New("connection reset mid-body")
	resp := &http.Response{StatusCode: 503, Header: http.Header{upgrade.HeaderCode: {upgrade.Code}},
		Body: io.NopCloser(io.MultiReader(strings.NewReader(`{"code":`), errorReader{boom}))}
	assert.ErrorIs(t, upgrade.ErrorFromResponse(resp), upgrade.ErrUpgradeInProgress, "the header is enough")
	got, err := io.ReadAll(resp.Body)
	assert.Equal(t, `{"code":`, string(got))
	assert.ErrorIs(t, err, boom, "the read error reaches the caller where it happened")
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

// TestRefusedRequestsAreNeverExecutedAcrossTransitions is the not-executed
// promise under a race: requests stream in while the gate flips between
// PhaseComplete and upgrade mode. Every request answered with a refusal must be
// absent from what the handler executed, and every 200 must be in it.
func TestRefusedRequestsAreNeverExecutedAcrossTransitions(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	var mu sync.Mutex
	executed := map[string]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Request-Id")
		mu.Lock()
		defer mu.Unlock()
		if executed[id] {
			t.Errorf("request %s executed twice", id)
		}
		executed[id] = true
	})
	srv := httptest.NewServer(upgrade.Middleware(g, nil)(h))
	defer srv.Close()
	defer srv.Client().Transport.(*http.Transport).CloseIdleConnections()

	stop := make(chan struct{})
	flipped := make(chan int)
	go func() {
		n := 0
		defer func() { flipped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n%2 == 0 {
				g.Complete()
			} else {
				_ = g.Enter(upgrade.Phase(1 + n%4/2)) // PhaseChecking or PhaseRunningSteps
			}
			n++
		}
	}()

	const workers, perWorker = 4, 60
	var refused, ok sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := strconv.Itoa(w*perWorker + i)
				req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader([]byte("x")))
				req.Header.Set("Request-Id", id)
				resp, err := srv.Client().Do(req)
				if !assert.NoError(t, err) {
					return
				}
				switch rerr := upgrade.ErrorFromResponse(resp); {
				case rerr == nil && resp.StatusCode == 200:
					ok.Store(id, true)
				case errors.Is(rerr, upgrade.ErrUpgradeInProgress):
					refused.Store(id, true)
				default:
					t.Errorf("request %s: status %d, err %v", id, resp.StatusCode, rerr)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(stop)
	require.Positive(t, <-flipped)

	mu.Lock()
	defer mu.Unlock()
	nRefused, nOK := 0, 0
	refused.Range(func(k, _ any) bool {
		nRefused++
		assert.False(t, executed[k.(string)], "refused request %s was executed", k)
		return true
	})
	ok.Range(func(k, _ any) bool {
		nOK++
		assert.True(t, executed[k.(string)], "request %s answered 200 but was not executed", k)
		return true
	})
	assert.Equal(t, workers*perWorker, nRefused+nOK)
	assert.Len(t, executed, nOK)
	t.Logf("%d served, %d refused", nOK, nRefused)
}

// flagWriter remembers whether the handler behind the middleware ran.
type flagWriter struct {
	nopWriter
	executed bool
}

// TestRefusedRequestsAreNeverExecutedInProcess is the same promise at a
// higher rate: requests served in-process by several goroutines while the
// gate flips. A request that got a 503 must not have entered the handler.
func TestRefusedRequestsAreNeverExecutedInProcess(t *testing.T) {
	g := upgrade.NewGate(upgrade.GateConfig{Clock: testclock.NewClock(t0)})
	h := upgrade.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(*flagWriter).executed = true
	}))
	stop := make(chan struct{})
	flips := make(chan int)
	go func() {
		n := 0
		for ; ; n++ {
			select {
			case <-stop:
				flips <- n
				return
			default:
			}
			switch n % 3 {
			case 0:
				g.Complete()
			case 1:
				_ = g.Enter(upgrade.PhaseChecking)
			case 2:
				_ = g.Enter(upgrade.PhaseRunningSteps)
			}
		}
	}()
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			r := httptest.NewRequest("POST", "/deploy", nil)
			for range 3000 {
				w := &flagWriter{nopWriter: nopWriter{h: http.Header{}, status: http.StatusOK}}
				h.ServeHTTP(w, r)
				switch {
				case w.status == http.StatusServiceUnavailable && w.executed:
					t.Error("a refused request reached the handler")
					return
				case w.status == http.StatusServiceUnavailable:
					refused.Add(1)
				case w.executed:
					served.Add(1)
				default:
					t.Errorf("neither refused nor served: %d", w.status)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%d flips, %d served, %d refused", <-flips, served.Load(), refused.Load())
	assert.Equal(t, int64(4*3000), served.Load()+refused.Load())
}
