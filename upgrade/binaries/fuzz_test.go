package binaries_test

import (
	"errors"
	"strings"
	"testing"

	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

// FuzzParseVersion: ParseVersion never panics, rejects with NotValid, and
// what it accepts prints back to something that parses to the same version
// (and to the input itself unless the input spelled out a ".0" build).
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.24.5", "1.24", "1.24.5.1", "0.0.0", "01.2.3", "1.2.3.0", "", ".", "1..2", "v1.2.3",
		"2147483647.2147483647.2147483647.2147483647", "2147483648.0.0", "1.2.3-rc1", "١.٢.٣", "1.2.3\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := binaries.ParseVersion(s)
		if err != nil {
			if !errors.Is(err, jujuerrors.NotValid) {
				t.Fatalf("%q: error %v does not match NotValid", s, err)
			}
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 || v.Build < 0 {
			t.Fatalf("%q parsed to negative %+v", s, v)
		}
		again, err := binaries.ParseVersion(v.String())
		if err != nil || again != v {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, v, v.String(), again, err)
		}
		if v.String() != s && !strings.HasSuffix(s, ".0") {
			t.Fatalf("%q prints as %q", s, v.String())
		}
	})
}
