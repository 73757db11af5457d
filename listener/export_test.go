package listener

import "net"

// NewWithListen is New with the socket factory replaced, so tests can
// inject a fake inner listener (EMFILE storms, blocked binds).
func NewWithListen(cfg Config, listen func(network, addr string) (net.Listener, error)) (*Listener, error) {
	if listen == nil {
		panic("NewWithListen: nil listen")
	}
	return newListener(cfg, listen)
}

// MinBurst exposes the default-burst rule.
var MinBurst = minBurst
