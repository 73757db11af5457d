package upgrade_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/upgrade"
)

// FuzzErrorFromResponse: whatever a server or proxy sends, ErrorFromResponse
// never panics, recognises only 503s, returns exactly one kind of refusal,
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
		case status != http.StatusServiceUnavailable:
			t.Fatalf("status %d decoded to %v", status, err)
		case inProgress == failed:
			t.Fatalf("%v matches in-progress %v, failed %v", err, inProgress, failed)
		case err.Error() == "":
			t.Fatal("empty message")
		}
		var ip *upgrade.InProgressError
		if errors.As(err, &ip) && ip.RetryAfter < 0 {
			t.Fatalf("negative RetryAfter %v", ip.RetryAfter)
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

// FuzzParseVersion: ParseVersion never panics, rejects with NotValid, and
// what it accepts prints back to something that parses to the same version
// (and to the input itself unless the input spelled out a ".0" build).
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.24.5", "1.24", "1.24.5.1", "0.0.0", "01.2.3", "1.2.3.0", "", ".", "1..2", "v1.2.3",
		"2147483647.2147483647.2147483647.2147483647", "2147483648.0.0", "1.2.3-rc1", "١.٢.٣", "1.2.3\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := upgrade.ParseVersion(s)
		if err != nil {
			if !errors.Is(err, jujuerrors.NotValid) {
				t.Fatalf("%q: error %v does not match NotValid", s, err)
			}
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 || v.Build < 0 {
			t.Fatalf("%q parsed to negative %+v", s, v)
		}
		again, err := upgrade.ParseVersion(v.String())
		if err != nil || again != v {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, v, v.String(), again, err)
		}
		if v.String() != s && !strings.HasSuffix(s, ".0") {
			t.Fatalf("%q prints as %q", s, v.String())
		}
	})
}
