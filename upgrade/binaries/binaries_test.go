package binaries_test

import (
	"errors"
	"fmt"
	"testing"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

func TestParseVersion(t *testing.T) {
	for s, want := range map[string]binaries.Version{
		"1.24.5":         {1, 24, 5, 0},
		"0.0.0":          {0, 0, 0, 0},
		"2.9.42.1":       {2, 9, 42, 1},
		"3.6.0.0":        {3, 6, 0, 0},
		"2147483647.0.0": {2147483647, 0, 0, 0},
	} {
		v, err := binaries.ParseVersion(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, v, s)
	}
}

func TestParseVersionRejectsGarbageClearly(t *testing.T) {
	for s, reason := range map[string]string{
		"1.24":           "series",
		"":               "1 dot-separated parts",
		"1":              "1 dot-separated parts",
		"1.2.3.4.5":      "5 dot-separated parts",
		"1..3":           "part 2 is empty",
		"1.2.3.":         "part 4 is empty",
		"a.b.c":          "part 1",
		"1.-2.3":         "not a decimal number",
		"+1.2.3":         "not a decimal number",
		" 1.2.3":         "not a decimal number",
		"1.2.3 ":         "not a decimal number",
		"v1.2.3":         "not a decimal number",
		"1.2.3-beta1":    "not a decimal number",
		"01.2.3":         "leading zero",
		"2147483648.0.0": "too large",
		"1.٣.3":          "not a decimal number",
	} {
		_, err := binaries.ParseVersion(s)
		require.Error(t, err, "%q", s)
		assert.ErrorIs(t, err, jujuerrors.NotValid, s)
		assert.ErrorContains(t, err, reason, s)
		assert.ErrorContains(t, err, "must be major.minor.patch[.build]", s)
	}
}

func TestVersionStringAndCompare(t *testing.T) {
	assert.Equal(t, "1.24.5", binaries.Version{1, 24, 5, 0}.String())
	assert.Equal(t, "1.24.5.3", binaries.Version{1, 24, 5, 3}.String())
	ordered := []string{"1.9.9", "1.23.3", "1.24.0", "1.24.5", "1.24.5.1", "1.24.5.10", "1.25.0", "2.0.0"}
	for i, a := range ordered {
		for j, b := range ordered {
			va, vb := mustVersion(t, a), mustVersion(t, b)
			assert.Equal(t, cmpInt(i, j), va.Compare(vb), "%s vs %s", a, b)
		}
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mustVersion(t testing.TB, s string) binaries.Version {
	t.Helper()
	v, err := binaries.ParseVersion(s)
	require.NoError(t, err)
	return v
}

func bin(t testing.TB, v, os, arch string) binaries.Binary {
	return binaries.Binary{Version: mustVersion(t, v), Platform: binaries.Platform{OS: os, Arch: arch},
		URL: fmt.Sprintf("https://example.invalid/agent-%s-%s-%s.tgz", v, os, arch)}
}

func TestMatchPicksTheExactVersionAndPlatform(t *testing.T) {
	available := []binaries.Binary{
		bin(t, "1.24.5", "linux", "arm64"),
		bin(t, "1.24.5", "linux", "amd64"),
		bin(t, "1.24.4", "linux", "amd64"),
	}
	b, err := binaries.Match(available, mustVersion(t, "1.24.5"), binaries.Platform{OS: "linux", Arch: "amd64"})
	require.NoError(t, err)
	assert.Equal(t, available[1], b)
}

// TestNoMatchingToolsNamesVersionPlatformAndNearest: where the old error
// said only "no matching tools available", this one must say what was wanted, for which platform, and what exists instead.
func TestNoMatchingToolsNamesVersionPlatformAndNearest(t *testing.T) {
	available := []binaries.Binary{
		bin(t, "1.23.3", "linux", "amd64"),
		bin(t, "1.24.6", "linux", "amd64"),
		bin(t, "1.24.4", "linux", "amd64"),
		bin(t, "1.24.5", "windows", "amd64"),
		bin(t, "1.24.5", "linux", "arm64"),
		bin(t, "1.24.5", "linux", "arm64"), // duplicates are named once
		bin(t, "2.0.0", "linux", "amd64"),
	}
	want := mustVersion(t, "1.24.5")
	_, err := binaries.Match(available, want, binaries.Platform{OS: "linux", Arch: "amd64"})
	require.ErrorIs(t, err, binaries.ErrNoMatch)
	var nm *binaries.NoMatchError
	require.ErrorAs(t, err, &nm)
	assert.Equal(t, want, nm.Want)
	assert.Equal(t, binaries.Platform{OS: "linux", Arch: "amd64"}, nm.Platform)
	assert.Equal(t, []binaries.Version{mustVersion(t, "1.24.4"), mustVersion(t, "1.24.6")}, nm.Nearest)
	assert.Equal(t, []binaries.Platform{{OS: "linux", Arch: "arm64"}, {OS: "windows", Arch: "amd64"}}, nm.OtherPlatforms)
	assert.Equal(t, "no agent binaries for 1.24.5 on linux/amd64; nearest for linux/amd64: 1.24.4, 1.24.6; "+
		"1.24.5 is available for linux/arm64, windows/amd64", err.Error())
}

func TestNoMatchingBinariesMessages(t *testing.T) {
	want := binaries.Version{Major: 1, Minor: 24}
	amd64 := binaries.Platform{OS: "linux", Arch: "amd64"}
	for _, tc := range []struct {
		name      string
		available []binaries.Binary
		msg       string
	}{
		{"nothing at all", nil, "no agent binaries for 1.24.0 on linux/amd64; no agent binaries are available at all"},
		{"only newer: the 1.24 vs 1.24.5 confusion", []binaries.Binary{bin(t, "1.24.5", "linux", "amd64")},
			"no agent binaries for 1.24.0 on linux/amd64; nearest for linux/amd64: 1.24.5"},
		{"only other platforms", []binaries.Binary{bin(t, "1.24.0", "linux", "s390x")},
			"no agent binaries for 1.24.0 on linux/amd64; none at all for linux/amd64; 1.24.0 is available for linux/s390x"},
	} {
		_, err := binaries.Match(tc.available, want, amd64)
		assert.ErrorIs(t, err, binaries.ErrNoMatch, tc.name)
		assert.EqualError(t, err, tc.msg, tc.name)
	}
	_, err := binaries.Match(nil, want, binaries.Platform{OS: "linux"})
	assert.ErrorIs(t, err, jujuerrors.NotValid)
}

func TestRestartRequired(t *testing.T) {
	var err error = binaries.RestartRequired{From: mustVersion(t, "1.23.3"), To: mustVersion(t, "1.24.5")}
	wrapped := fmt.Errorf("upgrader: %w", err)
	assert.ErrorIs(t, wrapped, binaries.ErrRestartRequired)
	var rr binaries.RestartRequired
	require.True(t, errors.As(wrapped, &rr))
	assert.Equal(t, mustVersion(t, "1.24.5"), rr.To)
	assert.Equal(t, "agent binaries changed from 1.23.3 to 1.24.5: restart the agent to run them", err.Error())
}

// A sentinel says where it came from, as etcd's "election: not leader"
// does, and reads well wrapped.
func TestSentinelsNameTheirPackage(t *testing.T) {
	for _, err := range []error{binaries.ErrNoMatch, binaries.ErrRestartRequired} {
		assert.Regexp(t, `^binaries: [a-z]`, err.Error())
	}
}
