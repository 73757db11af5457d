//go:build !linux

package etcdfault

// MemberMain does nothing: the harness runs on Linux only (a peer proxy
// tells which member dialled a connection from /proc, and members die
// with their test process by Pdeathsig).
func MemberMain() {}
