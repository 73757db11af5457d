package upgrade_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coldstart-go/coldstart/upgrade"
)

// FuzzErrorFromResponse: whatever a server or proxy sends, ErrorFromResponse
// never panics, recognises only 503s and 409s (a 409 only as a failed
// upgrade), returns exactly one kind of refusal,
// never a negative RetryAfter, and leaves the whole body readable.
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
		if errors.As(err, &ip) && ip.RetryAfter() < 0 {
			t.Fatalf("negative RetryAfter %v", ip.RetryAfter())
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
