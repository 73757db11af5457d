package dialer

import "errors"

// A Dialer is the "self-dial" readiness component, with the shape of
// gate.Component: follow it (board.Follow("self-dial", d)) before anything
// dials.

// Completed returns a channel that is closed when the Dialer has moved
// home: at its first call (Dial or Connect, so also Transport's and
// grpcdialer's connections) that connects to this machine's controller
// once LocalReady has closed; never by a peer's connection, nor by a local
// one made before. It is nil when LocalPort is 0.
func (d *Dialer) Completed() <-chan struct{} { return d.home }

// Failed returns a channel that is closed when the Dialer can never move
// home, at once when LocalPort is 0, and nil otherwise: a Dialer with a
// local controller never fails.
func (d *Dialer) Failed() <-chan struct{} {
	if d.home == nil {
		return closedChan
	}
	return nil
}

// Cause returns why Failed closed (there is no local controller), or nil.
func (d *Dialer) Cause() error {
	if d.home == nil {
		return errNoHome
	}
	return nil
}

// Detail says what the Dialer waits for before it moves home: "waits for
// the local controller to serve" until LocalReady closes, then "local
// controller serving, not dialled yet"; "" once home.
func (d *Dialer) Detail() string {
	switch {
	case d.home == nil:
		return errNoHome.Error()
	case d.atHome.Load():
		return ""
	case !isClosed(d.cfg.LocalReady):
		return "waits for the local controller to serve"
	}
	return "local controller serving, not dialled yet"
}

var (
	closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
	errNoHome  = errors.New("dialer: no local controller (LocalPort 0) to move home to")
)
