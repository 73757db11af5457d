package boardview_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/upgrade"
)

// forged is what a hostile name, cause or Detail tries to write: a line of
// its own in a readiness answer, which probes and people read as a check.
const forged = "\n[+]forged ok\n[-]forged failed: x\r\n"

const mega = 1 << 20

// hostileBoard is a board whose every word comes from somewhere hostile: a
// gate name, a failure cause, a component's Detail and an upgrade step's
// error carrying forged readiness lines; a name that is not UTF-8; a
// megabyte of name, of cause and of Detail. It returns the names on it.
func hostileBoard(t *testing.T) (*gate.Board, []string) {
	t.Helper()
	b := gate.NewBoard(gate.BoardConfig{Name: "c0" + forged, Clock: testclock.NewClock(t0)})
	t.Cleanup(func() { b.Close() })
	serving := add(b, "serving")
	named := add(b, "a"+forged).After(serving)
	add(b, "bad\xff\xfename")
	add(b, strings.Repeat("n", mega))
	add(b, "lease").After(named).Fail(errors.New("x" + forged))
	add(b, "huge-cause").Fail(errors.New(strings.Repeat("c", mega)))

	b.Follow("component", newComponent("d"+forged))
	b.Follow("huge-detail", newComponent(strings.Repeat("d", mega)))

	up := upgrade.NewGate(upgrade.GateConfig{})
	b.Follow("upgrade", up)
	err := up.RunSteps(context.Background(), func(context.Context) error { return errors.New("step" + forged) })
	require.Error(t, err)
	serving.Unlock()

	var names []string
	for _, e := range b.Report() {
		names = append(names, e.Name)
	}
	return b, names
}

// lines returns body's lines, each without the tree a chain is drawn with.
func lines(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		out = append(out, strings.TrimLeft(l, " └─"))
	}
	return out
}

// assertNoForgedLine fails if a line of body was written by a name, a
// cause or a Detail (it starts as forged's lines do), if body carries a
// control character other than the line feeds it is made of, or if it is
// big enough to have echoed a megabyte.
func assertNoForgedLine(t *testing.T, what, body string) {
	t.Helper()
	for _, l := range lines(body) {
		if strings.HasPrefix(l, "[+]forged") || strings.HasPrefix(l, "[-]forged") {
			t.Errorf("%s: a forged line %q", what, l)
			break
		}
	}
	for _, r := range body {
		if r != '\n' && (unicode.IsControl(r) || r == '\u2028' || r == '\u2029') {
			t.Errorf("%s: control character %U in the answer", what, r)
			break
		}
	}
	assert.True(t, utf8.ValidString(body), "%s: not UTF-8", what)
	assert.Less(t, len(body), 64<<10, "%s: %d bytes: a megabyte name, cause or detail was echoed whole", what, len(body))
}

// The incident: a newline in a gate's name, a failure's cause, a
// component's Detail or an upgrade step's error wrote "[+]forged ok" into
// /readyz?verbose and the text timeline as a line of its own, and a
// megabyte of any of them was echoed whole. Every answer boardview serves
// shows them on their own line, printable and bounded.
func TestNoOutsideTextForgesALine(t *testing.T) {
	b, names := hostileBoard(t)

	for _, target := range []string{"/readyz", "/readyz?verbose", "/readyz?verbose&exclude=serving&exclude=" + url.QueryEscape("nope"+forged)} {
		rec := serve(b, target, "")
		body := rec.Body.String()
		assertNoForgedLine(t, target, body)
		// One line per entry, a warning for the unknown exclusion, the verdict.
		want := len(names) + 1
		if strings.Contains(target, "exclude") {
			want++
		}
		assert.Len(t, strings.Split(strings.TrimSuffix(body, "\n"), "\n"), want, "%s:\n%.3000s", target, body)
	}

	rec := serve(b, "/readyz", "application/json")
	assertNoForgedLine(t, "/readyz as JSON", rec.Body.String())
	var entries []map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &entries))
	assert.Len(t, entries, len(names))

	targets := []string{"/timeline", "/timeline?format=json", "/timeline?format=svg", "/timeline?format=trace"}
	for _, n := range names {
		targets = append(targets, "/timeline?gate="+url.QueryEscape(n))
	}
	targets = append(targets, "/timeline?gate="+url.QueryEscape("nope"+forged), "/timeline?format="+url.QueryEscape("x"+forged))
	for _, target := range targets {
		rec := getTimeline(t, b, target, "")
		what := target
		if len(what) > 80 {
			what = what[:80] + "…"
		}
		assertNoForgedLine(t, what, rec.Body.String())
		switch {
		case strings.Contains(target, "format=json"), strings.Contains(target, "format=trace"):
			assert.True(t, json.Valid(rec.Body.Bytes()), "%s: not JSON", what)
		case strings.Contains(target, "format=svg"):
			d := xml.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
			for {
				_, err := d.Token()
				if err == io.EOF {
					break
				}
				require.NoError(t, err, "%s: not XML", what)
			}
		}
	}

	var buf bytes.Buffer
	require.NoError(t, boardview.WriteSVG(&buf, b.Timeline(), b.Timeline()))
	assertNoForgedLine(t, "WriteSVG", buf.String())
	buf.Reset()
	require.NoError(t, boardview.WriteTrace(&buf, b.Timeline(), b.Timeline()))
	assertNoForgedLine(t, "WriteTrace", buf.String())
}

// Found by FuzzReadTimeline: a timeline read from another process that
// ended within a tick of the largest Duration drew its time axis for ever
// (the tick's time wrapped round to negative, and stayed below the end).
// Its picture, and that of lanes started millennia apart, are drawn.
func TestSVGOfTimelinesAtTheEndsOfTimeIsDrawn(t *testing.T) {
	var timelines []gate.Timeline
	for _, body := range []string{
		`{"start":"2026-11-30T01:00:00Z","end":"2562047h47m16.854775807s","entries":[{"name":"a","state":"unlocked","added":"0s","ended":"2562047h47m16.854775807s","took":"1s"}]}`,
		`{"start":"0001-01-01T00:00:00Z","end":"2562047h","entries":[{"name":"b","state":"locked","added":"0s","ended":"2562047h","took":"2562047h"}]}`,
		`{"start":"9999-12-31T23:59:59Z","end":"1s","entries":[{"name":"c","state":"locked","added":"0s","ended":"1s","took":"1s"}]}`,
	} {
		tl, err := boardview.ReadTimeline(strings.NewReader(body))
		require.NoError(t, err)
		timelines = append(timelines, tl)
	}
	drawn := make(chan []byte, 2)
	for _, ts := range [][]gate.Timeline{timelines[:1], timelines} {
		go func() {
			var buf bytes.Buffer
			_ = boardview.WriteSVG(&buf, ts...)
			drawn <- buf.Bytes()
		}()
		select {
		case svg := <-drawn:
			d := xml.NewDecoder(bytes.NewReader(svg))
			for {
				_, err := d.Token()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("WriteSVG of %d timelines still drawing after 10s", len(ts))
		}
	}
}
