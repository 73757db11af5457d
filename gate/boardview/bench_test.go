package boardview_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// board20 is a 20-gate board a controller might have mid-startup: 14 open,
// 5 still locked, 1 failed.
func board20() *gate.Board {
	b := gate.NewBoard(gate.BoardConfig{})
	for i := range 20 {
		l := add(b, fmt.Sprintf("gate-%02d", i))
		switch {
		case i < 14:
			l.Unlock()
		case i == 19:
			l.Fail(errors.New("no quorum"))
		}
	}
	return b
}

// timelineBoard20 is a 20-gate board mid-startup with composites and
// declared inputs, so its chains are several links long: 16 leaves, 14 of
// them open, one failed; two AllOf; two gates after them.
func timelineBoard20(name string) *gate.Board {
	b := gate.NewBoard(gate.BoardConfig{Name: name})
	leaves := make([]*gate.Lock, 16)
	for i := range leaves {
		leaves[i] = add(b, fmt.Sprintf("gate-%02d", i))
	}
	first := gate.AllOf("first-half", gate.Waiter(leaves[0]), leaves[1], leaves[2], leaves[3], leaves[4], leaves[5], leaves[6], leaves[7])
	put(b, first)
	stable := gate.AllOf("stable", gate.Waiter(first), leaves[8], leaves[9], leaves[10], leaves[11], leaves[12], leaves[13])
	put(b, stable)
	api := add(b, "api-port").After(stable)
	add(b, "workers").After(api)
	for i, l := range leaves {
		switch {
		case i < 14:
			l.Unlock()
		case i == 15:
			l.Fail(errors.New("no quorum"))
		}
	}
	api.Unlock()
	return b
}

// discard is a ResponseWriter that keeps nothing, so that the benchmark
// measures the handler, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

func serveBench(b *testing.B, h http.Handler, target, accept string) {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

// BenchmarkReadyHandler is the cost of one /readyz answer from a 20-gate
// board beside the Board.Report it is made from.
func BenchmarkReadyHandler(b *testing.B) {
	mid := board20()
	ready := gate.NewBoard(gate.BoardConfig{})
	for i := range 20 {
		add(ready, fmt.Sprintf("gate-%02d", i)).Unlock()
	}
	b.Run("report", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = mid.Report()
		}
	})
	for _, tc := range []struct {
		name, target, accept string
		board                *gate.Board
	}{
		{"plain-ready", "/readyz", "", ready},
		{"plain-failing", "/readyz", "", mid},
		{"verbose", "/readyz?verbose", "", mid},
		{"json", "/readyz", "application/json", mid},
	} {
		b.Run(tc.name, func(b *testing.B) { serveBench(b, boardview.ReadyHandler(tc.board), tc.target, tc.accept) })
	}
}

// BenchmarkTimelineHandler is the cost of a timeline of a 20-gate board,
// and of each of its answers, beside the /readyz?verbose answer of the
// same board in the same run.
func BenchmarkTimelineHandler(b *testing.B) {
	board := timelineBoard20("c0")
	b.Run("readyz-verbose", func(b *testing.B) { serveBench(b, boardview.ReadyHandler(board), "/readyz?verbose", "") })
	b.Run("Timeline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = board.Timeline().CriticalChain("")
		}
	})
	for _, format := range []string{"text", "json", "svg", "trace"} {
		b.Run(format, func(b *testing.B) {
			serveBench(b, boardview.TimelineHandler(board), "/timeline?format="+format, "")
		})
	}
}

// BenchmarkExport is the cost of writing three 20-gate boards as one trace
// and one swimlane SVG, of merging their three trace files, and of reading
// one board's served JSON back.
func BenchmarkExport(b *testing.B) {
	var timelines []gate.Timeline
	var traces, bodies [][]byte
	for _, name := range []string{"c0", "c1", "c2"} {
		t := timelineBoard20(name).Timeline()
		timelines = append(timelines, t)
		var buf bytes.Buffer
		if err := boardview.WriteTrace(&buf, t); err != nil {
			b.Fatal(err)
		}
		traces = append(traces, buf.Bytes())
	}
	rec := httptest.NewRecorder()
	boardview.TimelineHandler(timelineBoard20("c0")).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/timeline?format=json", nil))
	bodies = append(bodies, rec.Body.Bytes())
	b.Run("WriteTrace-3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = boardview.WriteTrace(io.Discard, timelines...)
		}
	})
	b.Run("WriteSVG-3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = boardview.WriteSVG(io.Discard, timelines...)
		}
	})
	b.Run("MergeTraces-3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = boardview.MergeTraces(io.Discard, bytes.NewReader(traces[0]), bytes.NewReader(traces[1]), bytes.NewReader(traces[2]))
		}
	})
	b.Run("ReadTimeline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := boardview.ReadTimeline(bytes.NewReader(bodies[0])); err != nil {
				b.Fatal(err)
			}
		}
	})
}
