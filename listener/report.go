package listener

import (
	"net"
	"time"
)

// Report is a snapshot of a Listener for status pages and dependency
// engines.
type Report struct {
	// Controller and API describe the two ports.
	Controller, API PortReport
	// Closed is true once Close has been called.
	Closed bool
	// Err is the permanent accept failure that killed the listener (a
	// *PortError matching ErrAcceptFailed), or nil.
	Err error
}

// PortReport describes one port. Counters are cumulative over the
// Listener's life, across CloseAPI and OpenAPI.
type PortReport struct {
	// Addr is the bound address, nil while the port is not bound.
	Addr net.Addr
	// Open is true while the port's accept loop runs.
	Open bool
	// Accepted counts connections accepted from the kernel on the port,
	// including one held while the rate limit delays its hand-off.
	Accepted uint64
	// RateLimited counts the accepted connections whose hand-off the rate
	// limit delayed (the API port's; always 0 on the controller port).
	RateLimited uint64
	// Refused counts the accepted connections the listener closed unserved
	// because the port closed under them (CloseAPI or Close while one
	// waited for the rate limit or for Accept). Agents refused by the
	// kernel never reach the process and are not counted: those dialling
	// an API port not open (unbound), and those still in the kernel's
	// accept queue when CloseAPI releases the socket.
	Refused uint64
	// Throttled is the total time the port's accept loop waited for the
	// rate limit or the connection cap (on the injected clock).
	Throttled time.Duration
	// Conns is the number of connections handed to Accept, or ready to
	// be, and not yet closed.
	Conns int
	// TemporaryErrors counts accept errors that were retried.
	TemporaryErrors uint64
	// LastTemporaryError is the latest of them, at LastTemporaryErrorAt
	// (injected clock); nil if none.
	LastTemporaryError   error
	LastTemporaryErrorAt time.Time
	// OpenErr is, for the API port, Cause: why it failed to open when
	// OpenAPIWhen closed, or why it never will; nil otherwise.
	OpenErr error
}

// Report returns a snapshot of the listener's state.
func (l *Listener) Report() Report {
	l.mu.Lock()
	closed, failErr := l.closed, l.failErr
	ctrl := l.ctrl.report(nil, !closed)
	if !closed {
		ctrl.Addr = l.ctrlAddr
	}
	var apiAddr net.Addr
	if l.apiLn != nil {
		apiAddr = l.apiLn.Addr()
	}
	api := l.api.report(apiAddr, l.apiSess != nil)
	l.mu.Unlock()
	api.OpenErr = l.Cause()

	r := Report{Controller: ctrl, API: api, Closed: closed}
	if failErr != nil {
		r.Err = failErr
		r.Controller.Open, r.API.Open = false, false
	}
	return r
}

func (p *portState) report(addr net.Addr, open bool) PortReport {
	r := PortReport{
		Addr:            addr,
		Open:            open,
		Accepted:        p.accepted.Load(),
		RateLimited:     p.rateLimited.Load(),
		Refused:         p.refused.Load(),
		Throttled:       time.Duration(p.throttled.Load()),
		Conns:           int(p.conns.Load()),
		TemporaryErrors: p.tempErrs.Load(),
	}
	p.errMu.Lock()
	r.LastTemporaryError, r.LastTemporaryErrorAt = p.lastTempErr, p.lastTempAt
	p.errMu.Unlock()
	return r
}
