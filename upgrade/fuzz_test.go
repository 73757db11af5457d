package upgrade_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/internal/printable"
	"github.com/coldstart-go/coldstart/upgrade"
)

// FuzzErrorFromResponse: whatever a server or proxy sends, ErrorFromResponse
// never panics, recognises only 503s and 409s (a 409 only as a failed
// upgrade), returns exactly one kind of refusal, a RetryAfter in
// [0, MaxRetryAfter], and leaves the whole body readable.
func FuzzErrorFromResponse(f *testing.F) {
	ours := `{"code":"upgrade-in-progress","phase":"running-steps","message":"upgrade in progress"}`
	f.Add(503, upgrade.Code, "5", "", "application/json", []byte(ours))
	f.Add(503, "", "1", "", "application/json", []byte(ours))
	f.Add(503, upgrade.CodeFailed, "", "", "application/json", []byte(`{"code":"upgrade-failed","phase":"failed","message":"x"}`))
	f.Add(503, upgrade.Code, "soon", "", "", []byte(`{"code":`))
	f.Add(503, upgrade.Code, "Mon, 30 Nov 2026 01:00:30 GMT", "Mon, 30 Nov 2026 01:00:00 GMT", "", []byte{})
	f.Add(503, upgrade.Code, "Mon, 30 Nov 2026 01:00:00 GMT", "Mon, 30 Nov 2026 02:00:00 GMT", "", []byte{})
	f.Add(503, "", "99999999999999999999", "", "text/html", []byte("<html>503</html>"))
	f.Add(503, "", "", "", "application/problem+json", []byte(`{"code":"upgrade-failed"}`))
	f.Add(503, "", "", "", "application/json", []byte(`[{"code":"upgrade-in-progress"}]`))
	f.Add(503, "", "", "", "application/json; charset=", []byte(`{"code":null,"phase":7}`))
	f.Add(200, upgrade.Code, "1", "", "application/json", []byte(ours))
	f.Add(409, upgrade.CodeFailed, "", "", "application/json", []byte(`{"code":"upgrade-failed","phase":"failed","message":"upgrade failed: x; call not executed","cause":"x"}`))
	f.Add(409, upgrade.Code, "1", "", "application/json", []byte(ours))
	f.Add(409, "", "", "", "application/json", []byte(`{"code":"upgrade-in-progress"}`))
	f.Add(-1, "\x00", "\xff", "", "\xff", []byte("\xff\xfe"))
	f.Add(503, upgrade.Code, "2", "", "application/json", []byte(`{"code":"upgrade-in-progress","phase":"draining","message":"m","peer_ready":true}`))
	f.Fuzz(func(t *testing.T, status int, code, retryAfter, date, contentType string, body []byte) {
		h := http.Header{}
		for k, v := range map[string]string{upgrade.HeaderCode: code, "Retry-After": retryAfter, "Date": date, "Content-Type": contentType} {
			if v != "" {
				h.Set(k, v)
			}
		}
		resp := &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
		err := upgrade.ErrorFromResponse(resp)

		inProgress, failed := errors.Is(err, upgrade.ErrUpgradeInProgress), errors.Is(err, upgrade.ErrUpgradeFailed)
		switch {
		case err == nil:
		case status != http.StatusServiceUnavailable && status != http.StatusConflict:
			t.Fatalf("status %d decoded to %v", status, err)
		case status == http.StatusConflict && !failed:
			t.Fatalf("a 409 decoded to %v, not a failed upgrade", err)
		case inProgress == failed:
			t.Fatalf("%v matches in-progress %v, failed %v", err, inProgress, failed)
		case err.Error() == "":
			t.Fatal("empty message")
		}
		var ip *upgrade.InProgressError
		if errors.As(err, &ip) && (ip.RetryAfter() < 0 || ip.RetryAfter() > upgrade.MaxRetryAfter) {
			t.Fatalf("RetryAfter %v not in [0, %v]", ip.RetryAfter(), upgrade.MaxRetryAfter)
		}
		if status == http.StatusServiceUnavailable && strings.TrimSpace(code) == upgrade.Code && !inProgress {
			t.Fatalf("our header %q decoded to %v", code, err)
		}
		rest, rerr := io.ReadAll(resp.Body)
		if rerr != nil || !bytes.Equal(rest, body) {
			t.Fatalf("body not preserved: %q, %v; want %q", rest, rerr, body)
		}
	})
}

// FuzzParseRetryAfter: whatever a server or proxy puts in Retry-After and
// Date, the wait read is in [0, MaxRetryAfter]: delay-seconds (any number
// of digits) as that many seconds up to the bound, an HTTP-date as its
// distance past Date (0 before it, or without a Date that parses), anything
// else 0.
func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range [][2]string{
		{"5", ""}, {"0", ""}, {" 3600 ", ""}, {"3601", ""}, {"007", ""},
		{"99999999999999", ""}, {"99999999999999999999", ""}, {"18446744073709551616", ""},
		{"-4", ""}, {"+5", ""}, {"1.5", ""}, {"5s", ""}, {"1_000", ""}, {"0x10", ""}, {"", ""},
		{"Mon, 30 Nov 2026 01:00:30 GMT", "Mon, 30 Nov 2026 01:00:00 GMT"},
		{"Mon, 30 Nov 2026 01:00:00 GMT", "Mon, 30 Nov 2026 02:00:00 GMT"},
		{"Tue, 30 Nov 2027 01:00:00 GMT", "Mon, 30 Nov 2026 01:00:00 GMT"},
		{"Monday, 30-Nov-26 01:00:30 GMT", "Mon Nov 30 01:00:00 2026"},
		{"Mon, 30 Nov 2026 01:00:30 GMT", "soon"},
		{"Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"},
		{"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, retryAfter, date string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("Date", date)
		got := upgrade.ParseRetryAfter(h)
		if got < 0 || got > upgrade.MaxRetryAfter {
			t.Fatalf("Retry-After %q, Date %q: %v, not in [0, %v]", retryAfter, date, got, upgrade.MaxRetryAfter)
		}
		v := strings.TrimSpace(h.Get("Retry-After")) // as the header carries it
		want := time.Duration(0)
		if digits := strings.TrimLeft(v, "0"); v != "" && strings.Trim(v, "0123456789") == "" {
			if n, err := strconv.Atoi(digits); len(digits) > 6 || err == nil && n > 3600 {
				want = upgrade.MaxRetryAfter
			} else {
				want = time.Duration(n) * time.Second
			}
		} else if at, err := http.ParseTime(v); err == nil {
			if d, err := http.ParseTime(h.Get("Date")); err == nil {
				want = min(max(at.Sub(d), 0), upgrade.MaxRetryAfter)
			}
		}
		if got != want {
			t.Fatalf("Retry-After %q, Date %q: %v, want %v", retryAfter, date, got, want)
		}
	})
}

// FuzzRefusalRoundTrip: a refusal Middleware sends decodes, with
// ErrorFromResponse, to what the gate said: in progress, its phase and a
// RetryAfter drawn from the gate's [R, 2R] in whole seconds (R rounded up,
// at least 1 s; both at most MaxRetryAfter); failed, its cause's text as
// the refusal shows it (one line, at most 1 KiB); complete, no refusal. A
// phase of 0x80 or more drains the gate (a ready peer when cause is not
// empty): a refusal with Connection: close and the peer's word.
func FuzzRefusalRoundTrip(f *testing.F) {
	f.Add(uint8(upgrade.PhaseRunningSteps), int64(4*time.Second), "")
	f.Add(uint8(upgrade.PhaseChecking), int64(1), "")
	f.Add(uint8(upgrade.PhaseChecking), int64(1500*time.Millisecond), "")
	f.Add(uint8(upgrade.PhaseRunningSteps), int64(3*time.Hour), "")
	f.Add(uint8(upgrade.PhaseRunningSteps), int64(1<<63-1), "")
	f.Add(uint8(upgrade.PhaseChecking), int64(0), "")
	f.Add(uint8(upgrade.PhaseComplete), int64(time.Second), "")
	f.Add(uint8(upgrade.PhaseFailed), int64(0), "step 7: disk full")
	f.Add(uint8(upgrade.PhaseFailed), int64(0), "x\n[+]forged ok\r\n")
	f.Add(uint8(upgrade.PhaseFailed), int64(0), "  padded  ")
	f.Add(uint8(upgrade.PhaseFailed), int64(0), strings.Repeat(`"<\\>&`, 400))
	f.Add(uint8(upgrade.PhaseFailed), int64(0), "bad\xff\xfe")
	f.Add(uint8(upgrade.PhaseFailed), int64(0), "upgrade failed: nested; call not executed")
	f.Add(uint8(0x80|upgrade.PhaseDraining), int64(2*time.Second), "peer")
	f.Add(uint8(0x80), int64(0), "")
	f.Fuzz(func(t *testing.T, phase uint8, retryAfter int64, cause string) {
		cfg := upgrade.GateConfig{Clock: testclock.NewClock(time.Unix(0, 0))}
		p := upgrade.Phase(phase % 4)
		if p == 0 {
			p = upgrade.PhaseFailed
		}
		if phase >= 0x80 {
			p = upgrade.PhaseDraining
			cfg.PeerReady = func() bool { return cause != "" }
		}
		g := upgrade.NewGate(cfg)
		if retryAfter > 0 {
			if err := g.SetRetryAfter(time.Duration(retryAfter)); err != nil {
				t.Fatal(err)
			}
		}
		switch p {
		case upgrade.PhaseDraining:
			if err := g.Drain(context.Background(), nil, 0); err != nil {
				t.Fatal(err)
			}
		case upgrade.PhaseChecking: // a new gate's phase
		case upgrade.PhaseRunningSteps:
			if err := g.Enter(p); err != nil {
				t.Fatal(err)
			}
		case upgrade.PhaseComplete:
			g.Complete()
		case upgrade.PhaseFailed:
			g.Fail(errors.New(cause))
		}
		rec := httptest.NewRecorder()
		upgrade.Middleware(g, nil)(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		resp := rec.Result()
		if resp.ContentLength > 4<<10 || rec.Body.Len() > 4<<10 {
			t.Fatalf("a refusal of %d bytes: more than a client reads", rec.Body.Len())
		}
		err := upgrade.ErrorFromResponse(resp)
		switch p {
		case upgrade.PhaseComplete:
			if err != nil {
				t.Fatalf("complete, yet %v", err)
			}
		case upgrade.PhaseFailed:
			var fe *upgrade.FailedError
			if !errors.As(err, &fe) || errors.Is(err, upgrade.ErrUpgradeInProgress) {
				t.Fatalf("failed with %q, decoded %v", cause, err)
			}
			got := fe.Err.Error()
			if strings.ContainsAny(got, "\n\r") || len(got) > printable.MaxText {
				t.Fatalf("cause %.60q decoded as %.60q (%d bytes)", cause, got, len(got))
			}
			shown := printable.Text(cause)
			switch {
			case strings.TrimSpace(shown) != shown || shown == "": // the client trims; an empty one gets words
			case len(shown) <= 256: // no JSON escape makes its refusal too long
				if got != shown {
					t.Fatalf("cause %q decoded as %q, want %q", cause, got, shown)
				}
			case got != shown && !(strings.HasSuffix(got, printable.Ellipsis) && strings.HasPrefix(shown, strings.TrimSuffix(got, printable.Ellipsis))):
				t.Fatalf("cause %.60q decoded as %.60q, not it or its start", cause, got)
			}
		default:
			var ip *upgrade.InProgressError
			if !errors.As(err, &ip) || errors.Is(err, upgrade.ErrUpgradeFailed) {
				t.Fatalf("in %v, decoded %v", p, err)
			}
			if ip.Phase != p {
				t.Fatalf("phase %v decoded as %v", p, ip.Phase)
			}
			if draining := p == upgrade.PhaseDraining; ip.PeerReady != (draining && cause != "") || (resp.Header.Get("Connection") == "close") != draining {
				t.Fatalf("in %v (a peer: %v), decoded PeerReady %v, Connection %q", p, cause != "", ip.PeerReady, resp.Header.Get("Connection"))
			}
			r := upgrade.DefaultRetryAfter
			if retryAfter > 0 {
				r = time.Duration(retryAfter)
			}
			// In whole seconds: R rounded up, at least 1, to that plus R
			// rounded down; each read as at most MaxRetryAfter.
			down := int64(r / time.Second)
			loS := down
			if r%time.Second != 0 {
				loS++
			}
			loS = max(loS, 1)
			bound := func(secs int64) time.Duration {
				if secs < 0 || secs > int64(upgrade.MaxRetryAfter/time.Second) { // < 0: the sum overflowed
					return upgrade.MaxRetryAfter
				}
				return time.Duration(secs) * time.Second
			}
			lo, hi := bound(loS), bound(loS+down)
			if d := ip.RetryAfter(); d < lo || d > hi || d%time.Second != 0 {
				t.Fatalf("R %v: RetryAfter %v, not whole seconds in [%v, %v]", r, d, lo, hi)
			}
		}
	})
}
