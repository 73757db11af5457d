package lease

import "sync/atomic"

// TokenGuard is the resource side of fencing, for resources outside the
// lease's store (a file, a database row, a remote service): it admits a
// write only if its fencing token is no older than the newest it has
// admitted, so that a leader paused past its term has its late write
// refused (DESIGN.md, "Fencing").
//
// Keep one TokenGuard per lease at the resource, and admit each write with
// the Status.Token it was made under, in the same critical section as the
// write when writes must not interleave. The zero TokenGuard admits any
// token. It is safe for concurrent use and never blocks.
type TokenGuard struct {
	newest atomic.Uint64
}

// Admit admits token if it is no older than the newest admitted so far,
// and records it; otherwise it returns a *StaleTokenError matching
// ErrStaleToken.
func (g *TokenGuard) Admit(token uint64) error {
	for {
		newest := g.newest.Load()
		switch {
		case token < newest:
			return &StaleTokenError{Token: token, Newest: newest}
		case token == newest || g.newest.CompareAndSwap(newest, token):
			return nil
		}
	}
}
