// Package printable makes text that came from outside the program — a
// gate's name, a failure's cause, a component's Detail, a name read back
// from another process — safe to print where people and probes read lines:
// a readiness answer, a timeline, a metric's label (gate/DESIGN.md,
// "Printable").
package printable

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The bounds of what is printed, in bytes: a name (a gate's, a board's, a
// label value), and a text (a cause or a Detail). Past its bound a string
// is cut at a character boundary and ends in Ellipsis, the whole at most
// the bound.
const (
	MaxName = 256
	MaxText = 1024
)

// Ellipsis ends a string that was cut.
const Ellipsis = "…"

// Name is String(s, MaxName).
func Name(s string) string { return String(s, MaxName) }

// Text is String(s, MaxText).
func Text(s string) string { return String(s, MaxText) }

// String returns s as one printable line of at most max bytes (max at
// least len(Ellipsis)): each C0 control character is replaced by its
// Unicode control picture (a newline by "␊", a tab by "␉"), DEL by "␡",
// every other control character, line or paragraph separator and byte
// that is not UTF-8 by U+FFFD; then, if it is longer than max, it is cut
// and ends in Ellipsis. String(String(s, max), max) == String(s, max), so
// layers that each make their text printable do not escape twice. A
// string that needs nothing is returned as is, without allocating.
func String(s string, max int) string {
	if len(s) <= max && clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max+len(Ellipsis)))
	for i := 0; i < len(s) && b.Len() <= max; { // past max, the rest is cut anyway
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		b.WriteRune(picture(r, size))
	}
	out := b.String()
	if len(out) <= max {
		return out
	}
	cut := max - len(Ellipsis)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + Ellipsis
}

// clean reports whether s is UTF-8 with nothing String replaces.
func clean(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if replaced(r) {
			return false
		}
	}
	return true
}

// replaced reports whether String replaces the valid rune r.
func replaced(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }

// picture is what String prints for the rune r that took size bytes of
// the input.
func picture(r rune, size int) rune {
	switch {
	case r == utf8.RuneError && size == 1: // not UTF-8
		return utf8.RuneError
	case r < 0x20:
		return 0x2400 + r // the control pictures: ␀ … ␟
	case r == 0x7f:
		return '\u2421' // ␡
	case replaced(r):
		return utf8.RuneError
	}
	return r
}

// Duration prints d to about four significant digits, as systemd-analyze
// does: 1.195s, 12.004s, 3.5ms, 870µs.
func Duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}
