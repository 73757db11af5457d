package binaries

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jujuerrors "github.com/juju/errors"
)

// Sentinel errors; the typed errors below match them.
var (
	// ErrNoMatch means no agent binaries fit the wanted version and
	// platform. Retrying will not help: fix the version asked for (the
	// *NoMatchError names what is available) or publish the binaries.
	ErrNoMatch = errors.New("binaries: no matching agent binaries")

	// ErrRestartRequired means new agent binaries are in place and the agent
	// must restart to run them; the restart is the caller's action.
	ErrRestartRequired = errors.New("binaries: restart required")
)

// Version is an agent version, major.minor.patch[.build]. Build 0 means
// "no build number" and is not printed.
type Version struct {
	Major, Minor, Patch, Build int
}

// ParseVersion parses "major.minor.patch" or "major.minor.patch.build":
// decimal numbers below 2³¹ without signs or leading zeros. Anything else
// is rejected with an error matching errors.NotValid (github.com/juju/errors)
// that says what was expected — notably a bare series such as "1.24", which
// names many versions, not one.
func ParseVersion(s string) (Version, error) {
	bad := func(reason string) (Version, error) {
		q := s
		if len(q) > 64 {
			q = q[:64] + "…"
		}
		return Version{}, jujuerrors.NotValidf("version %q (must be major.minor.patch[.build], e.g. 1.24.5: %s)", q, reason)
	}
	parts := strings.Split(s, ".")
	if len(parts) == 2 && digits(parts[0]) && digits(parts[1]) {
		return bad("that is a series (many versions), not a version; add the patch number, e.g. " + s + ".0")
	}
	if len(parts) != 3 && len(parts) != 4 {
		return bad(fmt.Sprintf("%d dot-separated parts", len(parts)))
	}
	var n [4]int
	for i, p := range parts {
		switch {
		case p == "":
			return bad(fmt.Sprintf("part %d is empty", i+1))
		case !digits(p):
			return bad(fmt.Sprintf("part %d (%.16q) is not a decimal number", i+1, p))
		case len(p) > 1 && p[0] == '0':
			return bad(fmt.Sprintf("part %d (%q) has a leading zero", i+1, p))
		}
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return bad(fmt.Sprintf("part %d is too large", i+1))
		}
		n[i] = int(v)
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Build: n[3]}, nil
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// String returns "major.minor.patch", with ".build" when Build is not 0.
func (v Version) String() string {
	s := strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor) + "." + strconv.Itoa(v.Patch)
	if v.Build != 0 {
		s += "." + strconv.Itoa(v.Build)
	}
	return s
}

// Compare returns -1, 0 or +1 as v is older than, equal to or newer than o.
func (v Version) Compare(o Version) int {
	return cmp.Or(
		cmp.Compare(v.Major, o.Major),
		cmp.Compare(v.Minor, o.Minor),
		cmp.Compare(v.Patch, o.Patch),
		cmp.Compare(v.Build, o.Build),
	)
}

// Platform is an operating system and CPU architecture, as in GOOS/GOARCH.
type Platform struct {
	OS, Arch string
}

// String returns "os/arch".
func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Binary describes one agent binary that can be fetched.
type Binary struct {
	Version  Version
	Platform Platform
	// URL and SHA256 say where to fetch it and how to check it; the matcher
	// does not look at them.
	URL    string
	SHA256 string
}

// NoMatchError says that no agent binary fits Want on Platform,
// and what is available instead. It matches ErrNoMatch.
type NoMatchError struct {
	Want     Version
	Platform Platform
	// Nearest are the newest older and the oldest newer versions available
	// for Platform, when they exist, in ascending order.
	Nearest []Version
	// OtherPlatforms are the platforms for which Want itself is available.
	OtherPlatforms []Platform
	// Available is how many binaries were offered in all.
	Available int
}

// Error names the wanted version, the platform, and what is available.
func (e *NoMatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no agent binaries for %s on %s", e.Want, e.Platform)
	if e.Available == 0 {
		b.WriteString("; no agent binaries are available at all")
		return b.String()
	}
	if len(e.Nearest) == 0 {
		fmt.Fprintf(&b, "; none at all for %s", e.Platform)
	} else {
		fmt.Fprintf(&b, "; nearest for %s: %s", e.Platform, joinStrings(e.Nearest))
	}
	if len(e.OtherPlatforms) > 0 {
		fmt.Fprintf(&b, "; %s is available for %s", e.Want, joinStrings(e.OtherPlatforms))
	}
	return b.String()
}

// Is reports whether target is ErrNoMatch.
func (e *NoMatchError) Is(target error) bool { return target == ErrNoMatch }

func joinStrings[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

// Match picks the agent binary for exactly version want on platform
// from available (the first, if several fit), or returns a *NoMatchError.
// An empty OS or Arch in platform is an error matching errors.NotValid.
func Match(available []Binary, want Version, platform Platform) (Binary, error) {
	if platform.OS == "" || platform.Arch == "" {
		return Binary{}, jujuerrors.NotValidf("platform %q (must have both an OS and an architecture)", platform)
	}
	e := &NoMatchError{Want: want, Platform: platform, Available: len(available)}
	var below, above *Version
	for i := range available {
		b := &available[i]
		c := b.Version.Compare(want)
		if b.Platform != platform {
			if c == 0 && !slices.Contains(e.OtherPlatforms, b.Platform) {
				e.OtherPlatforms = append(e.OtherPlatforms, b.Platform)
			}
			continue
		}
		switch {
		case c == 0:
			return *b, nil
		case c < 0 && (below == nil || b.Version.Compare(*below) > 0):
			below = &b.Version
		case c > 0 && (above == nil || b.Version.Compare(*above) < 0):
			above = &b.Version
		}
	}
	if below != nil {
		e.Nearest = append(e.Nearest, *below)
	}
	if above != nil {
		e.Nearest = append(e.Nearest, *above)
	}
	slices.SortFunc(e.OtherPlatforms, func(a, b Platform) int {
		return cmp.Or(cmp.Compare(a.OS, b.OS), cmp.Compare(a.Arch, b.Arch))
	})
	return Binary{}, e
}

// RestartRequired is the error an agent returns once it has installed new
// agent binaries: it must restart to run To instead of From. The restart is
// the caller's action. It matches ErrRestartRequired.
type RestartRequired struct {
	From, To Version
}

// Error implements error.
func (e RestartRequired) Error() string {
	return fmt.Sprintf("agent binaries changed from %s to %s: restart the agent to run them", e.From, e.To)
}

// Is reports whether target is ErrRestartRequired.
func (e RestartRequired) Is(target error) bool { return target == ErrRestartRequired }
