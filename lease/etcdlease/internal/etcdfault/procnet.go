//go:build linux

package etcdfault

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Which process dialled a connection, from /proc (DESIGN.md, "Who dialled").

// socketInode returns the inode of the IPv4 TCP socket whose local and
// remote addresses are local and remote, from /proc/net/tcp.
func socketInode(local, remote netip.AddrPort) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	want := [2]string{procAddr(local), procAddr(remote)}
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) >= 10 && fs[1] == want[0] && fs[2] == want[1] && fs[9] != "0" { // 0: TIME_WAIT
			return fs[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no socket %v -> %v in /proc/net/tcp", local, remote)
}

// procAddr formats an IPv4 address and port as /proc/net/tcp does: the
// address as the kernel's 32-bit word in hex (native byte order), the port
// in hex.
func procAddr(ap netip.AddrPort) string {
	ip := ap.Addr().As4() // network order, as the kernel stores it
	word := binary.NativeEndian.Uint32(ip[:])
	return fmt.Sprintf("%08X:%04X", word, ap.Port())
}

// ownsSocket reports whether process pid has the socket inode open.
func ownsSocket(pid int, inode string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			return true
		}
	}
	return false
}

// dialledBy returns which of pids dialled c (an accepted loopback
// connection), or -1.
func dialledBy(c net.Conn, pids []int) int {
	remote, err1 := netip.ParseAddrPort(c.RemoteAddr().String())
	local, err2 := netip.ParseAddrPort(c.LocalAddr().String())
	if err1 != nil || err2 != nil || !remote.Addr().Is4() {
		return -1
	}
	// The dialler's socket: its local address is our remote one.
	inode, err := socketInode(remote, local)
	if err != nil {
		return -1
	}
	for i, pid := range pids {
		if pid > 0 && ownsSocket(pid, inode) {
			return i
		}
	}
	return -1
}
