package etcdtest

// Held returns how many chunks of bytes the link has read and not yet
// delivered: what a fault holds.
func (k *Link) Held() int64 { return k.p.Held() }

// EphemeralLow is the lowest port the kernel hands out by itself.
func EphemeralLow() int { return ephemeralLow() }
