// Package binaries picks the agent binaries for an upgrade and says
// precisely why when none fit.
//
// Match returns a *NoMatchError naming
// the wanted version, the platform, the nearest versions that are
// available and the platforms that do have the wanted one; ParseVersion
// rejects a bare series with an error that says so (upgrade/DESIGN.md). An
// agent that has installed new binaries returns RestartRequired.
//
//	want, err := binaries.ParseVersion("1.24.5")
//	b, err := binaries.Match(available, want, binaries.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH})
//	if errors.Is(err, binaries.ErrNoMatch) {
//		gate.Fail(err) // the message names what was wanted and what exists
//	}
package binaries
