package listener

import (
	"errors"
	"fmt"
)

// Listener errors. A Listener that has been closed reports net.ErrClosed
// (match it with errors.Is), as every net.Listener does.
var (
	// ErrBind means a port could not be bound (address in use, no such
	// interface, permission denied). From OpenAPI the listener stays
	// controller-only and fully usable: retry OpenAPI later or give up.
	// From New nothing was started: fix the address or retry.
	ErrBind = errors.New("listener: cannot bind port")

	// ErrAcceptFailed means a port's accept loop met a permanent error (one
	// that backing off cannot cure). The Listener is dead: Accept returns
	// this error from now on; Close it and build a new one.
	ErrAcceptFailed = errors.New("listener: accept failed")
)

// PortError is the error of one port: a failed bind (it matches ErrBind) or
// a permanent accept failure (it matches ErrAcceptFailed). It unwraps to the
// underlying error, so errors.Is(err, syscall.EADDRINUSE) also works.
type PortError struct {
	// Port is the port that failed.
	Port Port
	// Op is "bind" or "accept".
	Op string
	// Addr is the address being bound or accepted on.
	Addr string
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *PortError) Error() string {
	return fmt.Sprintf("listener: %s %s port %s: %v", e.Op, e.Port, e.Addr, e.Err)
}

// Unwrap returns the underlying error.
func (e *PortError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel matching e.Op.
func (e *PortError) Is(target error) bool {
	switch target {
	case ErrBind:
		return e.Op == opBind
	case ErrAcceptFailed:
		return e.Op == opAccept
	}
	return false
}

const (
	opBind   = "bind"
	opAccept = "accept"
)
