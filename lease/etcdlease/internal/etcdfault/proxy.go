//go:build linux

package etcdfault

import (
	"net"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/faultnet"
)

// The members' traffic goes through faultnet proxies, at the addresses the
// cluster advertises; a cut of link i→j holds exactly the bytes i sends j
// (DESIGN.md, "Proxies and cuts").

// newPeerProxy starts the proxy in front of member i's peer port.
func newPeerProxy(i int, link func(from, to int) *faultnet.Path, dialler func(net.Conn) int) (*faultnet.Proxy, error) {
	return faultnet.Listen("", faultnet.Config{Wait: true, Route: func(in net.Conn) (up, down *faultnet.Path, ok bool) {
		from := dialler(in)
		if from < 0 {
			// Not one of our members (or it died as it dialled): it
			// would cross a link we cannot name. etcd redials.
			return nil, nil, false
		}
		return link(from, i), link(i, from), true
	}})
}

// newClientProxy starts the proxy in front of a member's client port: what
// clients send crosses clientsIn; the answers are never held.
func newClientProxy(clientsIn *faultnet.Path) (*faultnet.Proxy, error) {
	var out faultnet.Path // never faulted
	return faultnet.Listen("", faultnet.Config{Wait: true, Route: func(net.Conn) (up, down *faultnet.Path, ok bool) {
		return clientsIn, &out, true
	}})
}

// proxyURL is the address the cluster advertises for a proxy's member.
func proxyURL(p *faultnet.Proxy) string { return "http://" + p.Addr() }

// cut and heal are a link's two states: a cut holds its bytes (faultnet's
// Pause) until the heal.
func cut(p *faultnet.Path)        { p.Set(faultnet.Pause, 0) }
func heal(p *faultnet.Path)       { p.Set(faultnet.None, 0) }
func isCut(p *faultnet.Path) bool { return p.Fault() != faultnet.None }
