//go:build !linux

package lease

import "time"

// bootSlept is nil off Linux: a suspend is not seen (DESIGN.md, "A
// stopped clock").
var bootSlept func() (time.Duration, bool)
