package boardview_test

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

func getTimeline(t *testing.T, b *gate.Board, target, accept string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	boardview.TimelineHandler(b).ServeHTTP(rec, req)
	return rec
}

const chainLegend = `The time when a gate opened or failed is printed after the "@" character.
The time it took after the input it waited for last is printed after the "+" character.
`

func TestTimelineHandlerPrintsTheCriticalChain(t *testing.T) {
	b, _ := controllerBoard(t, gate.BoardConfig{})

	rec := getTimeline(t, b, "/timeline", "")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
	assert.Equal(t, chainLegend+`
workers @2.5s +400ms
└─api-port @2.1s +100ms
  └─stable @2s
    └─upgrade @2s +1.2s
      └─serving @800ms +800ms
`, rec.Body.String())

	rec = getTimeline(t, b, "/timeline?gate=self-dial&gate=metrics", "")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, chainLegend+`
self-dial @1s +200ms
└─serving @800ms +800ms

metrics @300ms +300ms
`, rec.Body.String())
}

func TestTimelineHandlerRefusesWhatItCannotAnswer(t *testing.T) {
	b, _ := controllerBoard(t, gate.BoardConfig{})

	rec := getTimeline(t, b, "/timeline?gate=workers&gate=mongo", "")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "no gate \"mongo\" on the board\n", rec.Body.String())

	rec = getTimeline(t, b, "/timeline?format=png", "")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, "format \"png\" (must be text, json, svg or trace)\n", rec.Body.String())

	rec = getTimeline(t, gate.NewBoard(gate.BoardConfig{}), "/timeline", "")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "no gates on the board\n", rec.Body.String())
}

// timelineJSON is what a script reads from ?format=json.
type timelineJSON struct {
	Start   time.Time `json:"start"`
	End     string    `json:"end"`
	Entries []struct {
		Name     string   `json:"name"`
		State    string   `json:"state"`
		Added    string   `json:"added"`
		Ended    string   `json:"ended"`
		Took     string   `json:"took"`
		Order    int      `json:"order"`
		After    []string `json:"after"`
		Critical string   `json:"critical"`
		Detail   string   `json:"detail"`
		Error    string   `json:"error"`
	} `json:"entries"`
	Chains [][]string `json:"chains"`
}

func TestTimelineHandlerJSON(t *testing.T) {
	b, clk := controllerBoard(t, gate.BoardConfig{})
	add(b, "mongo").Fail(errors.New("no quorum"))
	put(b, gate.New("backup"))
	clk.Advance(time.Second)

	for _, tc := range []struct{ target, accept string }{
		{"/timeline?format=json", ""},
		{"/timeline", "text/html;q=0.9, application/json"},
	} {
		rec := getTimeline(t, b, tc.target, tc.accept)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var got timelineJSON
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		assert.Equal(t, t0, got.Start)
		assert.Equal(t, "4s", got.End)
		require.Len(t, got.Entries, 10)

		stable := got.Entries[5]
		assert.Equal(t, "stable", stable.Name)
		assert.Equal(t, "unlocked", stable.State)
		assert.Equal(t, "100ms", stable.Added)
		assert.Equal(t, "2s", stable.Ended)
		assert.Equal(t, "0s", stable.Took)
		assert.Equal(t, 6, stable.Order)
		assert.Equal(t, []string{"serving", "self-dial", "upgrade", "lease"}, stable.After)
		assert.Equal(t, "upgrade", stable.Critical)

		mongo := got.Entries[8]
		assert.Equal(t, "failed", mongo.State)
		assert.Equal(t, "no quorum", mongo.Error)
		assert.Equal(t, "3s", mongo.Ended)

		backup := got.Entries[9]
		assert.Equal(t, "locked", backup.State)
		assert.Equal(t, "4s", backup.Ended, "a locked entry ends when the timeline is taken")
		assert.Equal(t, "1s", backup.Took)
		assert.Zero(t, backup.Order)

		assert.Equal(t, [][]string{{"backup"}}, got.Chains, "a locked entry nothing waits for ends last")
	}

	rec := getTimeline(t, b, "/timeline?format=json&gate=workers&gate=self-dial", "")
	var got timelineJSON
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Equal(t, [][]string{{"workers", "api-port", "stable", "upgrade", "serving"}, {"self-dial", "serving"}}, got.Chains)
}

// svgRect is a <rect> of the SVG timeline.
type svgRect struct {
	Class string `xml:"class,attr"`
	Gate  string `xml:"data-gate,attr"`
	Board string `xml:"data-board,attr"`
	State string `xml:"data-state,attr"`
	Chain bool   `xml:"data-chain,attr"`
	X     string `xml:"x,attr"`
	Width string `xml:"width,attr"`
}

// span returns where the bar starts and ends, in pixels.
func (r svgRect) span(t *testing.T) (x0, x1 float64) {
	t.Helper()
	x, err := strconv.ParseFloat(r.X, 64)
	require.NoError(t, err)
	w, err := strconv.ParseFloat(r.Width, 64)
	require.NoError(t, err)
	return x, x + w
}

// parseSVG checks that body is well-formed XML with an <svg> root in the
// SVG namespace, and returns its bars in document order and all its text.
func parseSVG(t *testing.T, body []byte) (bars []svgRect, text string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(string(body)))
	var sb strings.Builder
	root := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the SVG must be well-formed XML")
		switch el := tok.(type) {
		case xml.StartElement:
			if root {
				assert.Equal(t, xml.Name{Space: "http://www.w3.org/2000/svg", Local: "svg"}, el.Name)
				root = false
			}
			assert.NotEqual(t, "script", el.Name.Local, "no script")
			for _, a := range el.Attr {
				assert.NotEqual(t, "href", a.Name.Local, "no link to another file")
			}
			if el.Name.Local == "rect" {
				var r svgRect
				require.NoError(t, dec.DecodeElement(&r, &el))
				if r.Class == "bar" {
					bars = append(bars, r)
				}
			}
		case xml.CharData:
			sb.Write(el)
		}
	}
	assert.False(t, root, "an <svg> element")
	return bars, sb.String()
}

func TestTimelineHandlerSVG(t *testing.T) {
	b, clk := controllerBoard(t, gate.BoardConfig{})
	add(b, "mongo").Fail(errors.New("no quorum"))
	clk.Advance(time.Second)

	rec := getTimeline(t, b, "/timeline?format=svg&gate=workers", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "image/svg+xml", rec.Header().Get("Content-Type"))
	bars, text := parseSVG(t, rec.Body.Bytes())

	require.Len(t, bars, 9, "one bar per entry")
	chain := map[string]bool{"workers": true, "api-port": true, "stable": true, "upgrade": true, "serving": true}
	for i, bar := range bars {
		assert.Equal(t, b.Timeline().Entries[i].Name, bar.Gate, "in board order")
		assert.Equal(t, chain[bar.Gate], bar.Chain, "%s is marked on the chain or not", bar.Gate)
	}
	assert.Equal(t, "failed", bars[8].State)
	assert.Contains(t, text, "failed @3s: no quorum", "a failed bar says so")
	assert.Contains(t, text, "critical chain: workers (@2.5s +400ms)")
	for _, tick := range []string{"0s", "500ms", "1s", "1.5s", "2s", "2.5s", "3s", "3.5s", "4s"} {
		assert.Contains(t, text, tick, "the time axis")
	}
	// Time runs left to right: the bars of the chain start where their
	// critical input ended (the "+"), one after the other.
	byName := map[string]svgRect{}
	for _, bar := range bars {
		byName[bar.Gate] = bar
	}
	_, servingEnd := byName["serving"].span(t)
	upgradeStart, upgradeEnd := byName["upgrade"].span(t)
	apiStart, apiEnd := byName["api-port"].span(t)
	workersStart, _ := byName["workers"].span(t)
	assert.InDelta(t, servingEnd, upgradeStart, 0.15)
	assert.InDelta(t, upgradeEnd, apiStart, 0.15)
	assert.InDelta(t, apiEnd, workersStart, 0.15)

	// Asked by Accept, as an image viewer asks.
	rec = getTimeline(t, b, "/timeline", "image/svg+xml")
	assert.Equal(t, "image/svg+xml", rec.Header().Get("Content-Type"))
	bars, _ = parseSVG(t, rec.Body.Bytes())
	assert.Len(t, bars, 9)

	// Accept's weights choose, not the order it names the types in.
	rec = getTimeline(t, b, "/timeline", "application/json;q=0.1, image/svg+xml")
	assert.Equal(t, "image/svg+xml", rec.Header().Get("Content-Type"))
	rec = getTimeline(t, b, "/timeline", "application/json;q=0.5, text/plain")
	assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
}

func TestTimelineSVGEscapesNamesAndErrors(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	add(b, `<script>"&'`).Fail(errors.New(`</svg><b>`))
	bars, text := parseSVG(t, getTimeline(t, b, "/timeline?format=svg", "").Body.Bytes())
	require.Len(t, bars, 1)
	assert.Equal(t, `<script>"&'`, bars[0].Gate)
	assert.Contains(t, text, `</svg><b>`)

	bars, text = parseSVG(t, getTimeline(t, gate.NewBoard(gate.BoardConfig{}), "/timeline?format=svg", "").Body.Bytes())
	assert.Empty(t, bars)
	assert.Contains(t, text, "no gates on the board")
}
