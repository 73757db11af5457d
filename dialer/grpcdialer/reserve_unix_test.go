//go:build unix

package grpcdialer_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// A copy of the dialer package's test helper (dialer/reserve_unix_test.go),
// which a test in another module cannot import.

// reservation is a loopback port held for one test: a TCP socket bound to
// 127.0.0.1:port, and one bound to [::1]:port when the host has IPv6, that
// do not listen. A dial to the port is refused at once, exactly as to a
// port nothing listens on, yet no other socket — in this process or in
// another test binary, which go test runs in parallel — can bind the port
// meanwhile, so a "down" server never turns out to be someone else's
// listener. (Closing a listener to "reserve" its port let a concurrent
// package's listener take it: a dialer test then reached that stranger.)
// listen turns the IPv4 socket into the server's listener on the port.
type reservation struct {
	port   int
	v4, v6 int // bound sockets; -1 once handed to listen, or v6 on a host without IPv6
}

// reserve holds a free loopback port until the test ends.
func reserve(t *testing.T) *reservation {
	t.Helper()
	for range 10 {
		r, err := tryReserve()
		if errors.Is(err, syscall.EADDRINUSE) {
			continue // [::1]:port is someone else's: take another port
		}
		if err != nil {
			t.Fatalf("reserving a loopback port: %v", err)
		}
		t.Cleanup(r.release)
		return r
	}
	t.Fatal("reserving a loopback port: [::1] was in use for every port tried")
	return nil
}

func tryReserve() (*reservation, error) {
	r := &reservation{v4: -1, v6: -1}
	var err error
	if r.v4, err = boundSocket(syscall.AF_INET, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, fmt.Errorf("bind 127.0.0.1:0: %w", err)
	}
	sa, err := syscall.Getsockname(r.v4)
	if err != nil {
		r.release()
		return nil, err
	}
	r.port = sa.(*syscall.SockaddrInet4).Port
	r.v6, err = boundSocket(syscall.AF_INET6, &syscall.SockaddrInet6{Port: r.port, Addr: [16]byte{15: 1}})
	switch {
	case err == nil:
	case errors.Is(err, syscall.EAFNOSUPPORT), errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EPROTONOSUPPORT):
		r.v6 = -1 // no IPv6 here: a dial to [::1] fails anyway
	default:
		r.release()
		return nil, fmt.Errorf("bind [::1]:%d: %w", r.port, err)
	}
	return r, nil
}

// boundSocket returns a TCP socket bound to sa, not listening. It does not
// set SO_REUSEADDR, so nothing else can bind the same address meanwhile.
func boundSocket(family int, sa syscall.Sockaddr) (int, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// listen starts listening on 127.0.0.1:port, on the reserved socket itself
// (so there is no moment at which another can take the port). [::1]:port
// stays held and refusing.
func (r *reservation) listen() (net.Listener, error) {
	if r.v4 < 0 {
		return nil, fmt.Errorf("127.0.0.1:%d: already listening", r.port)
	}
	if err := syscall.Listen(r.v4, syscall.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("listen 127.0.0.1:%d: %w", r.port, err)
	}
	f := os.NewFile(uintptr(r.v4), fmt.Sprintf("127.0.0.1:%d", r.port))
	r.v4 = -1
	defer f.Close()
	return net.FileListener(f) // a dup: closing f leaves the listener open
}

func (r *reservation) release() {
	for _, fd := range []*int{&r.v4, &r.v6} {
		if *fd >= 0 {
			syscall.Close(*fd)
			*fd = -1
		}
	}
}
