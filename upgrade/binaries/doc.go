// Package binaries picks the agent binaries for an upgrade and says
// precisely why when none fit.
//
// An agent-binary upgrade used to fail with "no matching tools available",
// naming nothing: not the version asked for, not the platform, not what was
// there instead (an operator had asked for the series "1.24" where a
// version such as "1.24.5" was meant). Match returns a *NoMatchError naming
// the wanted version, the platform, the nearest versions that are
// available and the platforms that do have the wanted one; ParseVersion
// rejects a bare series with an error that says so. An agent that has
// installed new binaries returns RestartRequired, and its supervisor
// restarts it.
//
//	want, err := binaries.ParseVersion("1.24.5")
//	b, err := binaries.Match(available, want, binaries.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH})
//	if errors.Is(err, binaries.ErrNoMatch) {
//		gate.Fail(err) // the message names what was wanted and what exists
//	}
package binaries
