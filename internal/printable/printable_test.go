package printable_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/coldstart-go/coldstart/internal/printable"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"api-port", 256, "api-port"},
		{"", 256, ""},
		{"a\n[+]forged ok", 256, "a␊[+]forged ok"},
		{"tab\there\r\n", 256, "tab␉here␍␊"},
		{"nul\x00del\x7f", 256, "nul␀del␡"},
		{"c1\u0085line\u2028para\u2029", 256, "c1\uFFFDline\uFFFDpara\uFFFD"},
		{"bad\xff\xfe", 256, "bad\uFFFD\uFFFD"},
		{"ünïcödé ✓ \uFFFD", 256, "ünïcödé ✓ \uFFFD"},
		{"abcdefgh", 8, "abcdefgh"},
		{"abcdefghi", 8, "abcde…"},
		{"ééééé", 8, "éé…"}, // never half a character
		{"a\nb\nc", 8, "a␊b…"},
	} {
		got := printable.String(tc.in, tc.max)
		assert.Equal(t, tc.want, got, "%q", tc.in)
		assert.LessOrEqual(t, len(got), tc.max)
	}
	assert.Len(t, printable.Name(strings.Repeat("n", 1<<20)), printable.MaxName)
	assert.Len(t, printable.Text(strings.Repeat("c", 1<<20)), printable.MaxText)
}

func TestStringAllocatesNothingForCleanText(t *testing.T) {
	s := "upgrade steps: migrate: dial tcp 10.0.0.1:17070: connect: connection refused"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = printable.Text(s) }))
}

// FuzzString: whatever the text, String returns valid UTF-8 with no
// control character or line separator, at most max bytes, unchanged when
// it needed nothing, and the same when applied again.
func FuzzString(f *testing.F) {
	f.Add("api-port", 256)
	f.Add("a\n[+]forged ok", 256)
	f.Add("bad\xff\xfe\xc3", 5)
	f.Add("ééééé", 4)
	f.Add("\u2028\u0085\x7f\x00", 3)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < len(printable.Ellipsis) || max > 1<<16 {
			return
		}
		got := printable.String(s, max)
		if !utf8.ValidString(got) || len(got) > max {
			t.Fatalf("String(%q, %d) = %q: not UTF-8 or too long", s, max, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("String(%q, %d) = %q keeps %U", s, max, got, r)
			}
		}
		if again := printable.String(got, max); again != got {
			t.Fatalf("String(%q) = %q, then %q", s, got, again)
		}
		needsNothing := len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
			return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
		})
		if needsNothing != (got == s) {
			t.Fatalf("String(%q, %d) = %q", s, max, got)
		}
	})
}
