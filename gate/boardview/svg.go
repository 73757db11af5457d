package boardview

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"time"
	"unicode/utf8"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// The SVG timeline's geometry, in pixels; text is monospace, so a string's
// width is its length times charW (labels) or noteW (notes).
const (
	svgMargin = 12.0
	plotWidth = 720.0
	rowHeight = 22.0
	barHeight = 14.0
	fontSize  = 12.0
	charW     = 7.2 // 0.6 em, a monospace advance
	noteSize  = 11.0
	noteW     = 6.6
	maxLabel  = 32 // characters of a name shown; the tooltip has the rest
	maxNote   = 56
)

// The timeline's colours: state by hue, the critical chain by depth.
const (
	colourOpen         = "#a9c9ea"
	colourOpenChain    = "#1f5fa8"
	colourFailed       = "#f0a8a8"
	colourFailedChain  = "#c62828"
	colourLocked       = "#d6d6d6"
	colourLockedChain  = "#6d6d6d"
	colourChainOutline = "#0b2545"
	colourGrid         = "#e4e4e4"
	colourText         = "#222222"
	colourMuted        = "#666666"
	colourBand         = "#f4f6f9"
)

// WriteSVG draws timelines as one SVG picture on one time axis, placed by
// their Start (the earliest at 0): a swimlane per board, headed by its name
// (Board, else "board N"), its own critical chain marked. One timeline is
// drawn as TimelineHandler draws it.
func WriteSVG(w io.Writer, timelines ...gate.Timeline) error {
	_, err := w.Write(timelineSVG(ownLanes(timelines)))
	return err
}

// A lane is one board drawn on the picture: its timeline, the chains to
// mark (indexes into its entries), and where its start falls on the
// shared time axis.
type lane struct {
	t      gate.Timeline
	chains [][]int
	offset time.Duration // t.Start minus the axis' zero
	first  int           // its first row on the picture
	// Per entry, set by timelineSVG: its times clipped and whole (for the
	// tooltip), and whether it is on a chain asked for.
	notes, full []string
	chain       []bool
}

// marks returns, per entry, whether it is on a chain asked for.
func (l *lane) marks() []bool {
	on := make([]bool, len(l.t.Entries))
	for _, c := range l.chains {
		for _, i := range c {
			on[i] = true
		}
	}
	return on
}

// ownLanes returns a lane per timeline, shown, its own chain marked.
func ownLanes(timelines []gate.Timeline) []lane {
	lanes := make([]lane, len(timelines))
	for i, t := range timelines {
		t = shownTimeline(t)
		lanes[i] = lane{t: t}
		if at := t.Index(""); at >= 0 {
			lanes[i].chains = [][]int{chainFrom(t, at)}
		}
	}
	return lanes
}

// timelineSVG draws lanes on one time axis (see WriteSVG): a bar per entry
// from added to ended, hatched while locked, red when failed; the chains
// drawn dark, names bold, a dashed line down from each link's input.
func timelineSVG(lanes []lane) []byte {
	if len(lanes) == 0 {
		lanes = []lane{{}} // an empty board's picture
	}
	swim := len(lanes) > 1
	zero := time.Time{}
	for i, l := range lanes {
		if i == 0 || l.t.Start.Before(zero) {
			zero = l.t.Start
		}
	}
	labelChars, noteChars, rows, entries := 8, 8, 0, 0
	var end time.Duration
	for k := range lanes {
		l := &lanes[k]
		if swim {
			l.offset = l.t.Start.Sub(zero)
			labelChars = max(labelChars, min(utf8.RuneCountInString(laneName(l.t, k)), maxLabel))
			rows++ // the lane's header
		}
		l.first = rows
		rows += len(l.t.Entries)
		entries += len(l.t.Entries)
		end = max(end, sum(l.offset, l.t.End))
		l.notes = make([]string, len(l.t.Entries))
		l.full = make([]string, len(l.t.Entries))
		l.chain = l.marks()
		for i, s := range l.t.Entries {
			labelChars = max(labelChars, min(utf8.RuneCountInString(s.Name), maxLabel))
			l.full[i] = times(s)
			l.notes[i] = clip(l.full[i], maxNote)
			noteChars = max(noteChars, utf8.RuneCountInString(l.notes[i]))
		}
	}
	p := svgPlot{
		lanes:   lanes,
		swim:    swim,
		end:     end,
		entries: entries,
		left:    svgMargin + float64(labelChars)*charW + 10,
		top:     svgMargin + 46, // title, then the axis' labels
		scale:   plotWidth / float64(max(end, time.Millisecond)),
	}
	width := p.left + plotWidth + 8 + float64(noteChars)*noteW + svgMargin
	height := p.top + float64(rows)*rowHeight + 12 + 28 + svgMargin

	var buf bytes.Buffer
	buf.Grow(600 + 520*rows)
	fmt.Fprintf(&buf, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="%g">
<defs><pattern id="locked" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="3" height="6" fill="#ffffff" fill-opacity="0.6"/></pattern>`+
		`<pattern id="locked-chain" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="3" height="6" fill="#ffffff" fill-opacity="0.35"/></pattern></defs>
<rect width="100%%" height="100%%" fill="#ffffff"/>
`, width, height, width, height, fontSize, colourLocked, colourLockedChain)
	p.title(&buf)
	for k := range lanes {
		p.band(&buf, k, width)
	}
	p.axis(&buf, height-svgMargin-28)
	for k := range lanes {
		p.header(&buf, k, width)
		p.links(&buf, k)
		for i := range lanes[k].t.Entries {
			p.row(&buf, k, i)
		}
	}
	p.legend(&buf, height-svgMargin-10)
	buf.WriteString("</svg>\n")
	return buf.Bytes()
}

// laneName is how lane k's board is named: its Board, else by its place.
func laneName(t gate.Timeline, k int) string {
	if t.Board != "" {
		return t.Board
	}
	return fmt.Sprintf("board %d", k+1)
}

// svgPlot is one SVG being drawn: x is time, a row per entry.
type svgPlot struct {
	lanes     []lane
	swim      bool          // several lanes: a header row each
	end       time.Duration // the axis' end
	entries   int           // on all lanes
	left, top float64       // where time 0 and the first row are
	scale     float64       // pixels per nanosecond
}

func (p *svgPlot) x(k int, d time.Duration) float64 {
	return p.left + (float64(p.lanes[k].offset)+float64(d))*p.scale
}

// y is where lane k's entry i's row starts (i -1: the lane's header).
func (p *svgPlot) y(k, i int) float64 {
	return p.top + float64(p.lanes[k].first+i)*rowHeight
}

// title names what the picture shows: the first chain's head, and when.
func (p *svgPlot) title(buf *bytes.Buffer) {
	var title string
	if p.swim {
		title = fmt.Sprintf("startup timeline: %d boards, %d gates, over %s", len(p.lanes), p.entries, printable.Duration(p.end))
	} else {
		l := p.lanes[0]
		title = fmt.Sprintf("startup timeline: %d gates, taken @%s", len(l.t.Entries), printable.Duration(l.t.End))
		if len(l.chains) > 0 {
			head := l.t.Entries[l.chains[0][0]]
			title += "; critical chain: " + head.Name + " (" + times(head) + ")"
		}
	}
	fmt.Fprintf(buf, `<text x="%g" y="%g" font-size="13" font-weight="bold" fill="%s">`, svgMargin, svgMargin+12, colourText)
	escape(buf, title)
	buf.WriteString("</text>\n")
	if p.entries == 0 && !p.swim {
		fmt.Fprintf(buf, `<text x="%g" y="%g" fill="%s">no gates on the board</text>`+"\n", p.left, p.top+14, colourMuted)
	}
}

// band draws, on a picture of several lanes, every other lane's
// background, under the time axis' grid.
func (p *svgPlot) band(buf *bytes.Buffer, k int, width float64) {
	if !p.swim || k%2 == 0 {
		return
	}
	h := float64(len(p.lanes[k].t.Entries)+1) * rowHeight
	fmt.Fprintf(buf, `<rect x="0" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", p.y(k, -1), width, h, colourBand)
}

// header draws, on a picture of several lanes, lane k's header row, over
// the grid: the board's name, when it started, and its chain's head (or
// that it has no gates).
func (p *svgPlot) header(buf *bytes.Buffer, k int, width float64) {
	if !p.swim {
		return
	}
	l := p.lanes[k]
	y := p.y(k, -1)
	fmt.Fprintf(buf, `<line x1="%g" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, svgMargin, y, width-svgMargin, y, colourMuted)
	fmt.Fprintf(buf, `<text class="lane" x="%g" y="%.1f" font-weight="bold" fill="%s">`, svgMargin, y+rowHeight/2+4, colourText)
	escape(buf, laneName(l.t, k))
	buf.WriteString("</text>")
	note := "no gates on the board"
	if len(l.chains) > 0 {
		head := l.t.Entries[l.chains[0][0]]
		note = fmt.Sprintf("started %s; critical chain: %s (%s)", "+"+printable.Duration(l.offset), head.Name, times(head))
	} else if len(l.t.Entries) > 0 {
		note = "started +" + printable.Duration(l.offset)
	}
	fmt.Fprintf(buf, `<rect x="%.1f" y="%.1f" width="%.1f" height="%g" fill="#ffffff" fill-opacity="0.85"/>`,
		p.left-2, y+4, float64(utf8.RuneCountInString(note))*noteW+4, rowHeight-8)
	fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" font-size="%g" fill="%s">`, p.left, y+rowHeight/2+4, noteSize, colourMuted)
	escape(buf, note)
	buf.WriteString("</text>\n")
}

// axis draws the time axis above the rows and a grid line per tick down
// to bottom.
func (p *svgPlot) axis(buf *bytes.Buffer, bottom float64) {
	end := max(p.end, time.Millisecond)
	step := tickStep(end)
	// Counted, not summed up to end (gate/DESIGN.md, "SVG axis").
	for i := time.Duration(0); i <= end/step; i++ {
		d := i * step
		x := p.left + float64(d)*p.scale
		fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x, p.top-6, x, bottom, colourGrid)
		fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="%g" fill="%s">%s</text>`+"\n",
			x, p.top-10, noteSize, colourMuted, printable.Duration(d))
	}
	fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", p.left, p.top-6, p.left+plotWidth, p.top-6, colourMuted)
}

// sum is a + b, saturated at the largest and smallest Durations: the
// times of timelines read from elsewhere (ReadTimeline) may be anything.
func sum(a, b time.Duration) time.Duration {
	switch c := a + b; {
	case a > 0 && b > 0 && c < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && c >= 0:
		return math.MinInt64
	default:
		return c
	}
}

// tickStep is a round step (1, 2 or 5 times a power of ten) that puts
// five to ten ticks on an axis of length end.
func tickStep(end time.Duration) time.Duration {
	for step := time.Duration(1); ; step *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if end/(step*m) <= 10 {
				return step * m
			}
		}
	}
}

// links draws, for each link of a chain asked for, a dashed line down
// from the moment its critical input ended to its own row: what it waited
// for, and when that came.
func (p *svgPlot) links(buf *bytes.Buffer, k int) {
	t := p.lanes[k].t
	for _, c := range p.lanes[k].chains {
		for j := 0; j+1 < len(c); j++ {
			from, to := c[j+1], c[j]
			x := p.x(k, t.Entries[from].Ended)
			fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="3,2"/>`+"\n",
				x, p.y(k, from)+rowHeight/2, x, p.y(k, to)+rowHeight/2, colourChainOutline)
		}
	}
}

// row draws lane k's entry i: its name, its bar from added to ended, and
// its times.
func (p *svgPlot) row(buf *bytes.Buffer, k, i int) {
	l := &p.lanes[k]
	s, chain := l.t.Entries[i], l.chain[i]
	y := p.y(k, i)
	weight, mark := "normal", ""
	if chain {
		weight, mark = "bold", "; on the critical chain"
	}
	board := ""
	if p.swim {
		board = laneName(p.lanes[k].t, k) + " "
	}
	fmt.Fprintf(buf, `<g><title>`)
	escape(buf, fmt.Sprintf("%s%s: %s, added @%s%s", board, s.Name, l.full[i], printable.Duration(s.Added), mark))
	buf.WriteString("</title>")
	fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" text-anchor="end" font-weight="%s" fill="%s">`, p.left-8, y+rowHeight/2+4, weight, colourText)
	escape(buf, clip(s.Name, maxLabel))
	buf.WriteString("</text>")
	// The bar: thin while it waited for its critical input, full height
	// for its own "+", as systemd-analyze plot draws activating and
	// active; a chain so reads as a staircase.
	x0, xw, x1 := p.x(k, s.Added), p.x(k, s.Ended-s.Took), p.x(k, s.Ended)
	fill, stroke := barColours(s.State, chain)
	if xw > x0 {
		fmt.Fprintf(buf, `<rect class="wait" x="%.1f" y="%.1f" width="%.1f" height="4" fill="%s"/>`, x0, y+rowHeight/2-2, xw-x0, fill)
	}
	fmt.Fprintf(buf, `<rect class="bar" data-gate="`)
	escape(buf, s.Name)
	if p.swim {
		buf.WriteString(`" data-board="`)
		escape(buf, laneName(p.lanes[k].t, k))
	}
	fmt.Fprintf(buf, `" data-state="%s" data-chain="%t" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="2" fill="%s"%s/>`,
		s.State, chain, xw, y+(rowHeight-barHeight)/2, max(x1-xw, 2), barHeight, fill, stroke)
	noteColour := colourMuted
	if s.State == gate.StateFailed {
		noteColour = colourFailedChain
	}
	fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" font-size="%g" font-weight="%s" fill="%s">`, max(x1, xw+2)+6, y+rowHeight/2+4, noteSize, weight, noteColour)
	escape(buf, l.notes[i])
	buf.WriteString("</text></g>\n")
}

// barColours returns a bar's fill and, on a chain, its outline attribute.
func barColours(s gate.State, chain bool) (fill, stroke string) {
	if chain {
		stroke = ` stroke="` + colourChainOutline + `" stroke-width="1.5"`
	}
	switch {
	case s == gate.StateFailed && chain:
		return colourFailedChain, stroke
	case s == gate.StateFailed:
		return colourFailed, stroke
	case s == gate.StateLocked && chain:
		return "url(#locked-chain)", stroke
	case s == gate.StateLocked:
		return "url(#locked)", stroke
	case chain:
		return colourOpenChain, stroke
	}
	return colourOpen, stroke
}

// legend explains the colours along the bottom.
func (p *svgPlot) legend(buf *bytes.Buffer, y float64) {
	x := p.left
	for _, item := range []struct {
		fill, label string
		height      float64
	}{
		{colourOpen, "opened", 10},
		{colourOpen, "waiting for its last input", 4},
		{colourFailed, "failed", 10},
		{"url(#locked)", "still locked", 10},
		{colourOpenChain, "critical chain", 10},
	} {
		fmt.Fprintf(buf, `<rect x="%.1f" y="%.1f" width="14" height="%g" fill="%s"/><text x="%.1f" y="%.1f" font-size="%g" fill="%s">%s</text>`+"\n",
			x, y-4-item.height/2, item.height, item.fill, x+18, y, noteSize, colourText, item.label)
		x += 18 + float64(len(item.label))*noteW + 22
	}
}

// clip shortens s to n characters, ending it with "…" if it was longer.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// escape writes s as XML character data or an attribute value.
func escape(buf *bytes.Buffer, s string) {
	xml.EscapeText(buf, []byte(s)) // writes to a bytes.Buffer cannot fail
}
