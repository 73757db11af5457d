package dialer

import (
	"context"
	"fmt"
	"log/slog"
)

// Report is a snapshot of a Dialer for status pages and logs. Its counters
// are cumulative and count calls of Dial and Connect (so also Transport's
// and grpcdialer's connections), not the attempts within a call.
type Report struct {
	// LocalReady is true once Config.LocalReady has closed.
	LocalReady bool
	// LocalDials counts the calls that connected to this machine's
	// controller, PeerDials those that connected to a peer.
	LocalDials, PeerDials uint64
	// Fallbacks counts the calls that dialled a peer although LocalPort is
	// set (LocalReady not closed within LocalReadyGrace, or under
	// PreferLocal the local addresses failing or slower than HeadStart),
	// once a call, whether or not a peer then answers.
	Fallbacks uint64
	// Failures counts the calls that returned a *DialError: ctx ended
	// before any address answered.
	Failures uint64
}

// Report returns a snapshot of the Dialer's counters.
func (d *Dialer) Report() Report {
	return Report{
		LocalReady: isClosed(d.LocalReady()),
		LocalDials: d.localDials.Load(),
		PeerDials:  d.peerDials.Load(),
		Fallbacks:  d.fallbacks.Load(),
		Failures:   d.failures.Load(),
	}
}

// Policy returns Config.Policy, for adapters that move their connections
// home: under RequireLocal there is nothing to move.
func (d *Dialer) Policy() Policy { return d.cfg.Policy }

// routeKind is the kind of route last logged.
type routeKind int32

const (
	routeNone routeKind = iota
	routeLocal
	routePeer
)

// won counts the call's connection, closes Completed if it is the first local
// one since LocalReady closed, and logs its route if the route changed
// since the last one logged.
func (c *connector[T]) won(addr string) Route {
	d := c.d
	r := Route{Addr: addr, Local: d.isLocal(addr), LocalReady: d.LocalReady()}
	kind := routePeer
	if r.Local {
		kind = routeLocal
		d.localDials.Add(1)
		if !d.atHome.Load() && isClosed(d.cfg.LocalReady) {
			d.homeOnce.Do(func() {
				d.atHome.Store(true)
				close(d.home)
			})
		}
	} else {
		d.peerDials.Add(1)
	}
	if d.cfg.Logger != nil && routeKind(d.lastRoute.Load()) != kind && routeKind(d.lastRoute.Swap(int32(kind))) != kind {
		attrs := []slog.Attr{slog.String("route", kind.String()), slog.String("addr", addr)}
		if kind == routePeer {
			if why := c.whyPeer(); why != nil {
				attrs = append(attrs, slog.Any("err", why))
			}
		}
		d.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "route chosen", attrs...)
	}
	return r
}

func (k routeKind) String() string {
	if k == routeLocal {
		return "local"
	}
	return "peer"
}

// whyPeer says why the call went to a peer although there is a local
// controller, or nil if there is none (LocalPort 0: peers are the route).
func (c *connector[T]) whyPeer() error {
	cfg := &c.d.cfg
	if cfg.LocalPort == 0 {
		return nil
	}
	if cfg.Policy == RequireLocalWhenReady {
		return fmt.Errorf("%w within LocalReadyGrace %v", ErrLocalNotReady, cfg.LocalReadyGrace)
	}
	// A local attempt cut short by the peer's win failed with the round's
	// cancellation, which says nothing about the local controller.
	var last error
	for _, a := range c.attempts {
		if err := c.real[a.Addr]; a.Local && err != nil {
			last = err
		}
	}
	if last != nil {
		return fmt.Errorf("local controller: %w", last)
	}
	return fmt.Errorf("local controller did not answer within HeadStart %v", cfg.HeadStart)
}
