package gate

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"time"
	"unicode/utf8"
)

// The SVG timeline's geometry, in pixels. Text is in the generic
// monospace family at fontSize (labels) and noteSize (the times beside a
// bar), so a string's width is its length times charW or noteW: no font
// file is needed to lay it out.
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
)

// timelineSVG draws t with the entries of chains highlighted; see
// TimelineHandler for what it shows.
func timelineSVG(t Timeline, chains [][]int) []byte {
	onChain := make([]bool, len(t.Entries))
	for _, c := range chains {
		for _, i := range c {
			onChain[i] = true
		}
	}
	labelChars, noteChars := 8, 8
	notes := make([]string, len(t.Entries))
	for i, s := range t.Entries {
		labelChars = max(labelChars, min(utf8.RuneCountInString(s.Name), maxLabel))
		notes[i] = clip(s.times()[1:], maxNote)
		noteChars = max(noteChars, utf8.RuneCountInString(notes[i]))
	}
	p := svgPlot{
		t:      t,
		left:   svgMargin + float64(labelChars)*charW + 10,
		top:    svgMargin + 46, // title, then the axis' labels
		scale:  plotWidth / float64(max(t.End, time.Millisecond)),
		notes:  notes,
		chain:  onChain,
		chains: chains,
	}
	width := p.left + plotWidth + 8 + float64(noteChars)*noteW + svgMargin
	height := p.top + float64(len(t.Entries))*rowHeight + 12 + 28 + svgMargin

	var buf bytes.Buffer
	buf.Grow(600 + 520*len(t.Entries))
	fmt.Fprintf(&buf, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="%g">
<defs><pattern id="locked" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="3" height="6" fill="#ffffff" fill-opacity="0.6"/></pattern>`+
		`<pattern id="locked-chain" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="%s"/><rect width="3" height="6" fill="#ffffff" fill-opacity="0.35"/></pattern></defs>
<rect width="100%%" height="100%%" fill="#ffffff"/>
`, width, height, width, height, fontSize, colourLocked, colourLockedChain)
	p.title(&buf)
	p.axis(&buf, height-svgMargin-28)
	p.links(&buf)
	for i := range t.Entries {
		p.row(&buf, i)
	}
	p.legend(&buf, height-svgMargin-10)
	buf.WriteString("</svg>\n")
	return buf.Bytes()
}

// svgPlot is one SVG being drawn: x is time, a row per entry.
type svgPlot struct {
	t         Timeline
	left, top float64 // where time 0 and the first row are
	scale     float64 // pixels per nanosecond
	notes     []string
	chain     []bool  // entry i is on a chain asked for
	chains    [][]int // the chains asked for
}

func (p *svgPlot) x(d time.Duration) float64 { return p.left + float64(d)*p.scale }
func (p *svgPlot) y(i int) float64           { return p.top + float64(i)*rowHeight }

// title names what the picture shows: the first chain's head, and when.
func (p *svgPlot) title(buf *bytes.Buffer) {
	title := fmt.Sprintf("startup timeline: %d gates, taken @%s", len(p.t.Entries), short(p.t.End))
	if len(p.chains) > 0 {
		head := p.t.Entries[p.chains[0][0]]
		title += "; critical chain: " + head.Name + " (" + head.times()[1:] + ")"
	}
	fmt.Fprintf(buf, `<text x="%g" y="%g" font-size="13" font-weight="bold" fill="%s">`, svgMargin, svgMargin+12, colourText)
	escape(buf, title)
	buf.WriteString("</text>\n")
	if len(p.t.Entries) == 0 {
		fmt.Fprintf(buf, `<text x="%g" y="%g" fill="%s">no gates on the board</text>`+"\n", p.left, p.top+14, colourMuted)
	}
}

// axis draws the time axis above the rows and a grid line per tick down
// to bottom.
func (p *svgPlot) axis(buf *bytes.Buffer, bottom float64) {
	end := max(p.t.End, time.Millisecond)
	step := tickStep(end)
	for d := time.Duration(0); d <= end; d += step {
		x := p.x(d)
		fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x, p.top-6, x, bottom, colourGrid)
		fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="%g" fill="%s">%s</text>`+"\n",
			x, p.top-10, noteSize, colourMuted, short(d))
	}
	fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", p.left, p.top-6, p.left+plotWidth, p.top-6, colourMuted)
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
func (p *svgPlot) links(buf *bytes.Buffer) {
	for _, c := range p.chains {
		for k := 0; k+1 < len(c); k++ {
			from, to := c[k+1], c[k]
			x := p.x(p.t.Entries[from].Ended)
			fmt.Fprintf(buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="3,2"/>`+"\n",
				x, p.y(from)+rowHeight/2, x, p.y(to)+rowHeight/2, colourChainOutline)
		}
	}
}

// row draws entry i: its name, its bar from added to ended, and its times.
func (p *svgPlot) row(buf *bytes.Buffer, i int) {
	s, chain := p.t.Entries[i], p.chain[i]
	y := p.y(i)
	weight, mark := "normal", ""
	if chain {
		weight, mark = "bold", "; on the critical chain"
	}
	fmt.Fprintf(buf, `<g><title>`)
	escape(buf, fmt.Sprintf("%s: %s, added @%s%s", s.Name, s.times()[1:], short(s.Added), mark))
	buf.WriteString("</title>")
	fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" text-anchor="end" font-weight="%s" fill="%s">`, p.left-8, y+rowHeight/2+4, weight, colourText)
	escape(buf, clip(s.Name, maxLabel))
	buf.WriteString("</text>")
	// The bar: thin while it waited for its critical input, full height
	// for its own "+", as systemd-analyze plot draws activating and
	// active; a chain so reads as a staircase.
	x0, xw, x1 := p.x(s.Added), p.x(s.Ended-s.Took), p.x(s.Ended)
	fill, stroke := barColours(s.State, chain)
	if xw > x0 {
		fmt.Fprintf(buf, `<rect class="wait" x="%.1f" y="%.1f" width="%.1f" height="4" fill="%s"/>`, x0, y+rowHeight/2-2, xw-x0, fill)
	}
	fmt.Fprintf(buf, `<rect class="bar" data-gate="`)
	escape(buf, s.Name)
	fmt.Fprintf(buf, `" data-state="%s" data-chain="%t" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="2" fill="%s"%s/>`,
		s.State, chain, xw, y+(rowHeight-barHeight)/2, max(x1-xw, 2), barHeight, fill, stroke)
	noteColour := colourMuted
	if s.State == StateFailed {
		noteColour = colourFailedChain
	}
	fmt.Fprintf(buf, `<text x="%.1f" y="%.1f" font-size="%g" font-weight="%s" fill="%s">`, max(x1, xw+2)+6, y+rowHeight/2+4, noteSize, weight, noteColour)
	escape(buf, p.notes[i])
	buf.WriteString("</text></g>\n")
}

// barColours returns a bar's fill and, on a chain, its outline attribute.
func barColours(s State, chain bool) (fill, stroke string) {
	if chain {
		stroke = ` stroke="` + colourChainOutline + `" stroke-width="1.5"`
	}
	switch {
	case s == StateFailed && chain:
		return colourFailedChain, stroke
	case s == StateFailed:
		return colourFailed, stroke
	case s == StateLocked && chain:
		return "url(#locked-chain)", stroke
	case s == StateLocked:
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
