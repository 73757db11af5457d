package leasestore

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/juju/errors"
)

// maxNameBytes bounds a lease name and a holder, and shownBytes the most of
// a refused one an error quotes (lease/DESIGN.md, "Names").
const (
	maxNameBytes = 253
	shownBytes   = 64
)

// CheckName returns nil if s can name a lease or a holder: 1 to 253 bytes
// (the longest DNS name, and so Kubernetes object name) of valid UTF-8
// with no control character (C0, DEL, C1) and no line or paragraph
// separator, none of which can start a line of its own in a text output.
// Otherwise it returns a NotValid error naming field, the rule and at most
// 64 bytes of s, quoted. lease.Config's Validate and every store's Claim
// apply it.
func CheckName(field, s string) error {
	switch {
	case s == "":
		return errors.NotValidf("empty %s (must be 1 to %d bytes of UTF-8 text without control characters)", field, maxNameBytes)
	case len(s) > maxNameBytes:
		return errors.NotValidf("%s %s (must be at most %d bytes)", field, shown(s), maxNameBytes)
	case !utf8.ValidString(s):
		return errors.NotValidf("%s %s (must be valid UTF-8)", field, shown(s))
	}
	for i, r := range s {
		if isControl(r) {
			return errors.NotValidf("%s %s (must have no control characters: %U at byte %d)", field, shown(s), r, i)
		}
	}
	return nil
}

// isControl reports whether r is a control character or a line or
// paragraph separator (U+2028, U+2029): a rune that breaks a line of text
// or is not text at all.
func isControl(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// shown is s quoted, cut to at most shownBytes bytes of it (on a rune
// boundary where s is UTF-8) with its length when cut.
func shown(s string) string {
	if len(s) <= shownBytes {
		return strconv.Quote(s)
	}
	n := shownBytes
	for i := 1; i < utf8.UTFMax && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}
