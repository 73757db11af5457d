package upgrade_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/upgrade"
)

// nopWriter is a ResponseWriter that costs (almost) nothing, so the
// benchmarks measure the middleware rather than a recorder.
type nopWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) WriteHeader(status int)      { w.status = status }
func (w *nopWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// BenchmarkMiddlewareOverhead measures an allowed request through the
// middleware and through the bare handler side by side, and reports the
// difference per request (goal: ≤ 100 ns).
func BenchmarkMiddlewareOverhead(b *testing.B) {
	cases := map[string]func(*upgrade.Gate) http.Handler{
		"complete": func(g *upgrade.Gate) http.Handler {
			g.Complete()
			return upgrade.Middleware(g, nil)(bareHandler)
		},
		"allowlisted-during-upgrade": func(g *upgrade.Gate) http.Handler {
			_ = g.Enter(upgrade.PhaseRunningSteps)
			return upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(bareHandler)
		},
	}
	for name, build := range cases {
		b.Run(name, func(b *testing.B) {
			h := build(upgrade.NewGate(upgrade.GateConfig{}))
			w := &nopWriter{h: http.Header{}}
			r := httptest.NewRequest("GET", "/status", nil)
			b.ReportAllocs()
			b.ResetTimer()
			// Interleave bare and wrapped runs in blocks so that drift
			// (frequency scaling, other tenants) hits both alike.
			const block = 1024
			var bare, wrapped time.Duration
			for done := 0; done < b.N; done += block {
				n := min(block, b.N-done)
				start := time.Now()
				for range n {
					bareHandler.ServeHTTP(w, r)
				}
				mid := time.Now()
				for range n {
					h.ServeHTTP(w, r)
				}
				bare, wrapped = bare+mid.Sub(start), wrapped+time.Since(mid)
			}
			b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-ns/op")
			b.ReportMetric(float64(wrapped.Nanoseconds())/float64(b.N), "wrapped-ns/op")
			b.ReportMetric(float64((wrapped-bare).Nanoseconds())/float64(b.N), "overhead-ns/op")
		})
	}
}

// BenchmarkRefusal is the cost of refusing a request, beside a bare handler
// that writes the same 503 by hand with Header().Set and a fresh body.
func BenchmarkRefusal(b *testing.B) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	_ = g.Enter(upgrade.PhaseRunningSteps)
	r := httptest.NewRequest("POST", "/deploy", nil)
	b.Run("middleware", func(b *testing.B) {
		h := upgrade.Middleware(g, nil)(bareHandler)
		w := &nopWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
		if w.status != http.StatusServiceUnavailable {
			b.Fatalf("status %d", w.status)
		}
	})
	b.Run("hand-written-503", func(b *testing.B) {
		body := `{"code":"upgrade-in-progress","phase":"running-steps","message":"upgrade in progress (running upgrade steps); call not executed"}` + "\n"
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set(upgrade.HeaderCode, upgrade.Code)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, body)
		})
		w := &nopWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	})
	b.Run("through-net/http", func(b *testing.B) {
		srv := httptest.NewServer(upgrade.Middleware(g, nil)(bareHandler))
		defer srv.Close()
		client := srv.Client()
		defer client.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Post(srv.URL, "text/plain", nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
}

// BenchmarkAdmit is the per-call guard an RPC server runs on every call:
// once complete (nothing counted), and while the gate refuses, a refused
// and an allowlisted call (each counted).
func BenchmarkAdmit(b *testing.B) {
	complete := upgrade.NewGate(upgrade.GateConfig{})
	complete.Complete()
	refusing := upgrade.NewGate(upgrade.GateConfig{})
	for _, c := range []struct {
		name        string
		g           *upgrade.Gate
		allowlisted bool
	}{{"complete", complete, false}, {"refused", refusing, false}, {"allowlisted", refusing, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.g.Admit(c.allowlisted)
			}
		})
	}
}

// BenchmarkRetryTransportOverhead is an admitted request through
// RetryTransport beside the same request through the transport it wraps (a
// round tripper answering 200 from memory, so only the wrapper is
// measured), interleaved in blocks, and reports the difference per request.
func BenchmarkRetryTransportOverhead(b *testing.B) {
	ok := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}
	bare := roundTripper(func(*http.Request) (*http.Response, error) { return ok, nil })
	wrapped := upgrade.RetryTransport(bare)
	req := httptest.NewRequest("GET", "/status", nil)
	b.ReportAllocs()
	const block = 1024
	var tb, tw time.Duration
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		start := time.Now()
		for range n {
			_, _ = bare.RoundTrip(req)
		}
		mid := time.Now()
		for range n {
			_, _ = wrapped.RoundTrip(req)
		}
		tb, tw = tb+mid.Sub(start), tw+time.Since(mid)
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/op")
	b.ReportMetric(float64(tw.Nanoseconds())/float64(b.N), "wrapped-ns/op")
	b.ReportMetric(float64((tw-tb).Nanoseconds())/float64(b.N), "overhead-ns/op")
}

// BenchmarkMiddlewareLogger is the allowed path through a gate with a
// logger beside the same path through a gate without one, interleaved in
// blocks, and reports their ratio (goal: within 5 %, no added allocation):
// the logger carries phase changes only and is never on the request path.
// PhaseComplete: nothing is counted; allowlisted during the upgrade: each
// request is counted.
func BenchmarkMiddlewareLogger(b *testing.B) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, name := range []string{"complete", "allowlisted-during-upgrade"} {
		b.Run(name, func(b *testing.B) {
			build := func(l *slog.Logger) http.Handler {
				g := upgrade.NewGate(upgrade.GateConfig{Logger: l})
				if name == "complete" {
					g.Complete()
				}
				return upgrade.Middleware(g, func(r *http.Request) bool { return r.URL.Path == "/status" })(bareHandler)
			}
			without, with := build(nil), build(logger)
			w := &nopWriter{h: http.Header{}}
			r := httptest.NewRequest("GET", "/status", nil)
			b.ReportAllocs()
			b.ResetTimer()
			// Blocks alternate which goes first, so neither always runs
			// on a warmer cache.
			const block = 1024
			var tn, tl time.Duration
			run := func(h http.Handler, n int) time.Duration {
				start := time.Now()
				for range n {
					h.ServeHTTP(w, r)
				}
				return time.Since(start)
			}
			for done, odd := 0, false; done < b.N; done, odd = done+block, !odd {
				n := min(block, b.N-done)
				if odd {
					tl += run(with, n)
					tn += run(without, n)
				} else {
					tn += run(without, n)
					tl += run(with, n)
				}
			}
			b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N), "nolog-ns/op")
			b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "log-ns/op")
			b.ReportMetric(float64(tl)/float64(tn), "log/nolog")
		})
	}
}
