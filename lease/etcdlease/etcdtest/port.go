package etcdtest

import (
	"bufio"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// A member's ports outlive its stops, so they are picked below the
// kernel's ephemeral range (DESIGN.md, "Ports").

// lowestPort is the lowest port picked: above the well-known and most
// registered ports.
const lowestPort = 10000

// ephemeralLow returns the lowest port of the kernel's ephemeral range:
// Linux's, from /proc/sys/net/ipv4/ip_local_port_range, else IANA's 49152
// (macOS, Windows, and the BSDs by default).
func ephemeralLow() int {
	f, err := os.Open("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 49152
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if lo, err := strconv.Atoi(strings.Fields(line + " x")[0]); err == nil && lo > 0 {
		return lo
	}
	return 49152
}

// stablePort returns a port of 127.0.0.1, free when asked, below the
// ephemeral range; 0 (the kernel's choice) if there is no room below it or
// no free port was found in 100 tries (another process may still take it
// first: see startAttempts).
func stablePort() int {
	hi := ephemeralLow()
	if hi-lowestPort < 1000 {
		return 0
	}
	for range 100 {
		p := lowestPort + rand.IntN(hi-lowestPort)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p
		}
	}
	return 0
}
