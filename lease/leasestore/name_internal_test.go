package leasestore

import (
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
		err := CheckName("Holder", s)
		admissible := s != "" && len(s) <= maxNameBytes && utf8.ValidString(s)
		for _, r := range s {
			admissible = admissible && !(r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029')
		}
		if admissible != (err == nil) {
			t.Fatalf("CheckName(%q) = %v; admissible %v", s, err, admissible)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		switch {
		case !errors.Is(err, errors.NotValid):
			t.Fatalf("CheckName(%q) = %v, not NotValid", s, err)
		case !strings.HasPrefix(msg, "Holder ") && !strings.HasPrefix(msg, "empty Holder "):
			t.Fatalf("CheckName(%q) = %q does not name the field first", s, msg)
		case len(msg) > 400:
			t.Fatalf("CheckName(%q) = %d bytes: the refusal must stay short", s, len(msg))
		case !utf8.ValidString(msg) || strings.ContainsFunc(msg, isControl):
			t.Fatalf("CheckName(%q) = %q is not one line of text", s, msg)
		}
	})
}
