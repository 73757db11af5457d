package binaries_test

import (
	"fmt"

	"github.com/coldstart-go/coldstart/upgrade/binaries"
)

func ExampleMatch() {
	v := func(s string) binaries.Version { v, _ := binaries.ParseVersion(s); return v }
	available := []binaries.Binary{
		{Version: v("1.24.4"), Platform: binaries.Platform{OS: "linux", Arch: "amd64"}},
		{Version: v("1.24.6"), Platform: binaries.Platform{OS: "linux", Arch: "amd64"}},
		{Version: v("1.24.5"), Platform: binaries.Platform{OS: "linux", Arch: "arm64"}},
	}
	_, err := binaries.Match(available, v("1.24.5"), binaries.Platform{OS: "linux", Arch: "amd64"})
	fmt.Println(err)

	_, err = binaries.ParseVersion("1.24")
	fmt.Println(err)
	// Output:
	// no agent binaries for 1.24.5 on linux/amd64; nearest for linux/amd64: 1.24.4, 1.24.6; 1.24.5 is available for linux/arm64
	// version "1.24" (must be major.minor.patch[.build], e.g. 1.24.5: that is a series (many versions), not a version; add the patch number, e.g. 1.24.0) not valid
}
