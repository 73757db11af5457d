package binaries_test

import (
	"fmt"
	"testing"

	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

// BenchmarkMatch picks one binary out of a 200-entry catalogue (40
// versions × 5 platforms), found and not found.
func BenchmarkMatch(b *testing.B) {
	platforms := []binaries.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}, {OS: "linux", Arch: "s390x"},
		{OS: "windows", Arch: "amd64"}, {OS: "darwin", Arch: "arm64"}}
	var available []binaries.Binary
	for patch := range 40 {
		for _, p := range platforms {
			available = append(available, binaries.Binary{Version: binaries.Version{Major: 1, Minor: 24, Patch: patch}, Platform: p,
				URL: fmt.Sprintf("https://example.invalid/agent-1.24.%d-%s.tgz", patch, p)})
		}
	}
	for name, want := range map[string]binaries.Version{
		"found":     {Major: 1, Minor: 24, Patch: 39},
		"not-found": {Major: 1, Minor: 24, Patch: 99},
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = binaries.Match(available, want, platforms[0])
			}
		})
	}
}
