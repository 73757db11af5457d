package lease

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/juju/errors"
)

// FuzzCheckName: the one rule for lease names and holders admits exactly
// the 1 to 253 bytes of UTF-8 text without control characters, and its
// refusal is one short line of valid UTF-8 whatever the value — a refusal
// goes into errors, logs and /readyz.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"", "singular-controller", "unit-0\n[+]forged ok", "a\x00", "a\x7f", "a\u0085",
		"a\u2028", "\xff\xfe", strings.Repeat("ü", 127), strings.Repeat("a", 254), strings.Repeat("\x80", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := checkName("Holder", s)
		admissible := s != "" && len(s) <= maxNameBytes && utf8.ValidString(s)
		for _, r := range s {
			admissible = admissible && !(r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029')
		}
		if admissible != (err == nil) {
			t.Fatalf("checkName(%q) = %v; admissible %v", s, err, admissible)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		switch {
		case !errors.Is(err, errors.NotValid):
			t.Fatalf("checkName(%q) = %v, not NotValid", s, err)
		case !strings.HasPrefix(msg, "Holder ") && !strings.HasPrefix(msg, "empty Holder "):
			t.Fatalf("checkName(%q) = %q does not name the field first", s, msg)
		case len(msg) > 400:
			t.Fatalf("checkName(%q) = %d bytes: the refusal must stay short", s, len(msg))
		case !utf8.ValidString(msg) || strings.ContainsFunc(msg, isControl):
			t.Fatalf("checkName(%q) = %q is not one line of text", s, msg)
		}
	})
}

// FuzzOneLine: oneLine returns one line of valid UTF-8 text of at most
// maxDetailBytes (and the note of a cut), leaves clean text as it is, and
// keeps the start of any text.
func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", "held until 2026-11-30T06:26:57Z", "boom\n[+]forged ok", "\r\x00\u0085\u2028\xff",
		strings.Repeat("y", 2000), strings.Repeat("\n", 600), strings.Repeat("ü", 600) + "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := oneLine(s)
		note := fmt.Sprintf("… (%d bytes)", len(s))
		body := strings.TrimSuffix(out, note)
		switch {
		case !utf8.ValidString(out) || strings.ContainsFunc(out, isControl):
			t.Fatalf("oneLine(%q) = %q is not one line of text", s, out)
		case len(body) > maxDetailBytes:
			t.Fatalf("oneLine(%q) is %d bytes, more than %d and the note of the cut", s, len(out), maxDetailBytes)
		case len(s) <= maxDetailBytes && utf8.ValidString(s) && !strings.ContainsFunc(s, isControl) && out != s:
			t.Fatalf("oneLine(%q) = %q changed clean text", s, out)
		case len(s) > maxDetailBytes && body == out:
			t.Fatalf("oneLine of %d bytes = %q, cut without saying so", len(s), out)
		}
		// The escaped text begins as s does, up to its first escape.
		clean := s
		if i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || isControl(r) }); i >= 0 {
			clean = s[:i]
		}
		if n := min(len(clean), len(body)); clean[:n] != body[:n] {
			t.Fatalf("oneLine(%q) = %q does not begin as the text does", s, out)
		}
	})
}
