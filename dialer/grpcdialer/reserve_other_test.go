//go:build !unix

package grpcdialer_test

import (
	"net"
	"strconv"
	"testing"
)

// reservation is a loopback port for one test. Off unix it is only a port
// that was free a moment ago (a listener opened and closed at once), so
// another process may take it in between; on unix (reserve_unix_test.go)
// the port is held.
type reservation struct{ port int }

func reserve(t *testing.T) *reservation {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return &reservation{port: port}
}

func (r *reservation) listen() (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(r.port))
}
