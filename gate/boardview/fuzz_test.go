package boardview_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// fuzzBoard is the board the handlers' fuzz tests ask about: an entry in
// each state, one that says what it is doing, names with the characters a
// query is made of, and one that tries to forge a line.
func fuzzBoard(f *testing.F) *gate.Board {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Name: "c0", Clock: clk})
	f.Cleanup(func() { b.Close() })
	serving := add(b, "serving")
	api := add(b, "api-port").After(serving)
	lease := add(b, "lease").After(serving)
	add(b, "x y&z=1;%").After(api)
	b.Add("self-dial", detailWaiter{make(chanWaiter)})
	add(b, "a"+forged)
	clk.Advance(time.Second)
	serving.Unlock()
	clk.Advance(time.Second)
	api.Unlock()
	lease.Fail(errors.New("no quorum" + forged))
	return b
}

// get serves target's query, raw as a client may send it, to h.
func get(h http.Handler, path, rawQuery, accept string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.URL.RawQuery = rawQuery
	if accept != "" {
		req.Header["Accept"] = []string{accept}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// FuzzReadyHandler: whatever query and Accept header a probe or a person
// sends, ReadyHandler answers 200 exactly when every gate not excluded is
// unlocked, else 503; in JSON, the gates not excluded; in text, "ok", or a
// line per gate and the verdict the code says, and no line written by a
// name or a query.
func FuzzReadyHandler(f *testing.F) {
	b := fuzzBoard(f)
	h := boardview.ReadyHandler(b)
	for _, seed := range [][2]string{
		{"", ""}, {"verbose", ""}, {"verbose=0", ""}, {"verbose&verbose", ""},
		{"exclude=lease", ""}, {"exclude=lease&exclude=self-dial&exclude=a%0A%5B%2B%5Dforged+ok%0A%5B-%5Dforged+failed%3A+x%0D%0A", ""},
		{"exclude=lease&exclude=self-dial&exclude=a%0A%5B%2B%5Dforged%20ok%0A%5B-%5Dforged%20failed%3A%20x%0D%0A&verbose", ""},
		{"exclude=x+y%26z%3D1%3B%25", ""}, {"exclude=nope%0A%5B%2B%5Dx", ""}, {"exclude=%ff%fe", ""},
		{"exclude", ""}, {"exclude=", ""}, {";;;&&&==", ""}, {"%zz&verbose", ""}, {"exclude=lease;verbose", ""},
		{"", "application/json"}, {"exclude=lease", "application/json;q=0.9, text/plain;q=0.8"},
		{"", "application/json;q=0"}, {"", "text/plain, application/json"}, {"", "application/json;q=nan"},
		{"", "*/*"}, {"", "application/json;q=1.0000001"}, {"", "\x00\xff;q="},
	} {
		f.Add(seed[0], seed[1])
	}
	report := b.Report()
	f.Fuzz(func(t *testing.T, rawQuery, accept string) {
		rec := get(h, "/readyz", rawQuery, accept)
		query, _ := url.ParseQuery(rawQuery) // as the handler reads it: the pairs that parse
		excluded := query["exclude"]
		want := http.StatusOK
		kept := 0
		for _, e := range report {
			if !slices.Contains(excluded, e.Name) {
				kept++
				if e.State != gate.StateUnlocked {
					want = http.StatusServiceUnavailable
				}
			}
		}
		if rec.Code != want {
			t.Fatalf("?%s: %d, want %d", rawQuery, rec.Code, want)
		}
		body := rec.Body.String()
		if rec.Header().Get("Content-Type") == "application/json" {
			var entries []map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &entries); err != nil || len(entries) != kept {
				t.Fatalf("?%s: %d entries, want %d (%v)", rawQuery, len(entries), kept, err)
			}
			return
		}
		if _, verbose := query["verbose"]; !verbose && want == http.StatusOK {
			if body != "ok" {
				t.Fatalf("?%s: %q, want ok", rawQuery, body)
			}
			return
		}
		lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		verdict := map[int]string{http.StatusOK: "readyz check passed", http.StatusServiceUnavailable: "readyz check failed"}[want]
		if lines[len(lines)-1] != verdict {
			t.Fatalf("?%s: verdict %q, want %q", rawQuery, lines[len(lines)-1], verdict)
		}
		checks := 0
		for _, l := range lines[:len(lines)-1] {
			switch {
			case strings.HasPrefix(l, "[+]forged"), strings.HasPrefix(l, "[-]forged"):
				t.Fatalf("?%s: a forged line %q", rawQuery, l)
			case strings.HasPrefix(l, "[+]"), strings.HasPrefix(l, "[-]"):
				checks++
			case !strings.HasPrefix(l, "warn: "):
				t.Fatalf("?%s: a line %q that is neither a check nor a warning", rawQuery, l)
			}
		}
		if checks != len(report) {
			t.Fatalf("?%s: %d checks, want %d", rawQuery, checks, len(report))
		}
	})
}

// FuzzTimelineHandler: whatever query and Accept header it is sent,
// TimelineHandler answers 400 for a ?format it does not serve, else 404
// for a ?gate on no entry, else 200 with the format asked for, well formed
// (JSON, trace events, an SVG that parses, text with no line written by a
// name or a query), and never hangs.
func FuzzTimelineHandler(f *testing.F) {
	b := fuzzBoard(f)
	h := boardview.TimelineHandler(b)
	for _, seed := range [][2]string{
		{"", ""}, {"format=text", ""}, {"format=json", ""}, {"format=svg", ""}, {"format=trace", ""},
		{"format=", ""}, {"format=JSON", ""}, {"format=x%0A%5B%2B%5Dforged", ""}, {"format=json&format=bogus", ""},
		{"gate=lease", ""}, {"gate=api-port&gate=serving&format=svg", ""}, {"gate=", ""}, {"gate=nope", ""},
		{"gate=a%0A%5B%2B%5Dforged+ok%0A%5B-%5Dforged+failed%3A+x%0D%0A", ""}, {"gate=x+y%26z%3D1%3B%25&format=trace", ""},
		{"gate=%ff", ""}, {"%zz", ""}, {"gate=lease&gate=lease", ""},
		{"", "application/json"}, {"", "image/svg+xml"}, {"", "image/svg+xml;q=0.5, application/json;q=0.4"},
		{"", "text/plain;q=0, application/json;q=0"}, {"format=text", "image/svg+xml"},
	} {
		f.Add(seed[0], seed[1])
	}
	names := map[string]bool{}
	for _, e := range b.Report() {
		names[e.Name] = true
	}
	f.Fuzz(func(t *testing.T, rawQuery, accept string) {
		rec := get(h, "/timeline", rawQuery, accept)
		query, _ := url.ParseQuery(rawQuery)
		format := query.Get("format")
		unknown := slices.ContainsFunc(query["gate"], func(n string) bool { return n != "" && !names[n] })
		switch {
		case format != "" && !slices.Contains([]string{"text", "json", "svg", "trace"}, format):
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("?%s: %d, want 400", rawQuery, rec.Code)
			}
		case unknown:
			if rec.Code != http.StatusNotFound {
				t.Fatalf("?%s: %d, want 404", rawQuery, rec.Code)
			}
		case rec.Code != http.StatusOK:
			t.Fatalf("?%s: %d, want 200", rawQuery, rec.Code)
		}
		body := rec.Body.Bytes()
		switch ct := rec.Header().Get("Content-Type"); {
		case ct == "application/json":
			if !json.Valid(body) {
				t.Fatalf("?%s: not JSON", rawQuery)
			}
		case ct == "image/svg+xml":
			checkXML(t, body)
		default:
			for _, l := range lines(string(body)) {
				if strings.HasPrefix(l, "[+]forged") || strings.HasPrefix(l, "[-]forged") {
					t.Fatalf("?%s: a forged line %q", rawQuery, l)
				}
			}
		}
	})
}

// checkXML fails unless body is well-formed XML.
func checkXML(t *testing.T, body []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(body))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
	}
}

// FuzzReadTimeline: whatever another process's /timeline answers,
// ReadTimeline returns an error or a timeline whose links (After,
// Critical) are entries of it, and WriteSVG and WriteTrace draw that
// timeline — beside this process's own — as a picture that parses and
// trace events that are JSON, without hanging.
func FuzzReadTimeline(f *testing.F) {
	b := fuzzBoard(f)
	f.Add(get(boardview.TimelineHandler(b), "/timeline", "format=json", "").Body.Bytes())
	for _, seed := range []string{
		`{"start":"2026-11-30T01:00:00Z","end":"3s","entries":[],"chains":[]}`,
		`{"board":"c9","start":"2026-11-30T01:00:00Z","end":"3s","entries":[{"name":"a","state":"locked","added":"0s","ended":"3s","took":"3s"}]}`,
		`{"start":"2026-11-30T01:00:00Z","end":"2562047h47m16.854775807s","entries":[{"name":"a","state":"unlocked","added":"0s","ended":"2562047h47m16.854775807s","took":"1s"}]}`,
		`{"start":"0001-01-01T00:00:00Z","end":"-3s","entries":[{"name":"a","state":"failed","added":"-5s","ended":"-1s","took":"-9s","error":"x\ny"}]}`,
		`{"start":"9999-12-31T23:59:59Z","end":"1ns","entries":[{"name":"a","state":"locked","added":"0s","ended":"0s","took":"0s","after":["a"],"critical":"a"}]}`,
		`{"start":"2026-11-30T01:00:00Z","end":"1s","entries":[{"name":"a","state":"locked","added":"0s","ended":"0s","took":"0s","critical":"b"},{"name":"b","state":"locked","added":"0s","ended":"0s","took":"0s","critical":"a"}]}`,
		`{"start":"2026-11-30T01:00:00Z","end":"1s","entries":[{"name":"a","state":"running","added":"0s","ended":"0s","took":"0s"}]}`,
		`{"start":"2026-11-30T01:00:00Z","end":"1s","entries":[{"name":"a","state":"locked","added":"0s","ended":"0s","took":"0s","after":["nope"]}]}`,
		`{"start":"yesterday","end":"1s","entries":[]}`, `{"start":"2026-11-30T01:00:00Z","end":"soon"}`,
		`[]`, `null`, `{}`, ``, `{"entries":[{"name":"` + strings.Repeat("n", 300) + `"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		read, err := boardview.ReadTimeline(bytes.NewReader(body))
		if err != nil {
			return
		}
		for i, s := range read.Entries {
			for _, a := range s.After {
				if a < 0 || a >= len(read.Entries) {
					t.Fatalf("entry %d: after %d, of %d entries", i, a, len(read.Entries))
				}
			}
			if s.Critical < -1 || s.Critical >= len(read.Entries) {
				t.Fatalf("entry %d: critical %d, of %d entries", i, s.Critical, len(read.Entries))
			}
		}
		own := b.Timeline()
		var svg, trace bytes.Buffer
		if err := boardview.WriteSVG(&svg, read, own); err != nil {
			t.Fatal(err)
		}
		checkXML(t, svg.Bytes())
		if err := boardview.WriteTrace(&trace, read, own); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(trace.Bytes()) {
			t.Fatal("trace events that are not JSON")
		}
	})
}
