package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
	"golang.org/x/time/rate"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// acceptBackoff paces retries of temporary accept errors as
// net/http.Server.Serve does: 5ms doubling to 1s, reset by the next
// successful accept.
var acceptBackoff = backoff.Policy{Min: 5 * time.Millisecond, Max: time.Second}

// Listener is a net.Listener over two TCP ports: the controller port,
// accepting from New, and the API port, accepting between OpenAPI and
// CloseAPI, rate-limited and capped in its own accept goroutine. Accept
// returns connections from both, preferring the controller port.
//
// A Listener is safe for concurrent use.
type Listener struct {
	cfg      Config
	clk      clock.Clock
	listen   func(network, addr string) (net.Listener, error)
	limiter  *rate.Limiter // nil: API port unlimited; used only by the API goroutine
	sem      chan struct{} // nil: no API cap; a slot per open API conn
	ctrlAddr net.Addr

	ctrl, api portState

	// Unbuffered hand-offs: a conn is either received by Accept or closed
	// by the goroutine that accepted it, never left in a buffer.
	ctrlCh, apiCh chan *conn

	// done is the listener's one stop signal, closed once by end after the
	// API port is released (why last: DESIGN.md, "The close path").
	done      chan struct{}
	closeDone chan struct{}  // closed when the first Close returns; later ones wait for it
	wg        sync.WaitGroup // the accept goroutines

	whens sync.WaitGroup // the OpenAPIWhen watchers

	// Completed and Failed; apiErr is Cause, written before apiFailed
	// closes. Both close under mu.
	apiOpened, apiFailed chan struct{}
	apiErr               error

	openMu sync.Mutex // serialises OpenAPI, CloseAPI and the watcher's open; never held by Close

	// mu guards the fields below. The listener has ended once closed is
	// set or failErr is not nil; end decides that, under mu, once.
	mu          sync.Mutex
	closed      bool   // Close has been called
	failErr     error  // the permanent accept error that ended the listener, if one did
	op          *apiOp // the API-port call in flight (under openMu), nil if none
	ctrlLn      net.Listener
	apiLn       net.Listener // bound API socket, nil while unbound
	apiSess     *session     // running API accept loop, nil while not open
	apiBindAddr string       // cfg.APIAddr, then the first real bound address
	opensWhen   string       // Detail's words for the last OpenAPIWhen's ready; "" before one
}

var _ net.Listener = (*Listener)(nil)

// session is one open period of the API port; its accept loop watches
// quit alone, which stopAPI closes.
type session struct {
	quit   chan struct{}
	exited chan struct{} // closed when the accept goroutine has returned
}

// apiOp is an API-port call in flight (OpenAPI, CloseAPI or an
// OpenAPIWhen watcher's open; one at a time, openMu). Close waits for a
// committed one only: DESIGN.md, "API-port calls and Close".
type apiOp struct {
	done  chan struct{}
	stage opStage // guarded by Listener.mu
}

type opStage int

const (
	opBinding opStage = iota
	opCommitted
	opInHook
)

// portState holds one port's counters for Report: atomics, read by
// Report and by nothing else.
type portState struct {
	port      Port
	accepted  atomic.Uint64
	throttled atomic.Int64 // nanoseconds
	conns     atomic.Int64

	rateLimited, refused, tempErrs atomic.Uint64

	errMu       sync.Mutex
	lastTempErr error
	lastTempAt  time.Time
}

// New validates cfg, binds the controller port (and the API port too if
// cfg.BindAPIEarly), reports them through cfg.OnBound and starts accepting
// on the controller port. A bind failure is returned as a *PortError
// matching ErrBind, and nothing is left bound.
func New(cfg Config) (*Listener, error) {
	return newListener(cfg, nil)
}

func newListener(cfg Config, listen func(network, addr string) (net.Listener, error)) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if listen == nil {
		listen = net.Listen
	}
	l := &Listener{
		cfg:         cfg,
		clk:         cfg.Clock,
		listen:      listen,
		ctrl:        portState{port: Controller},
		api:         portState{port: API},
		ctrlCh:      make(chan *conn),
		apiCh:       make(chan *conn),
		done:        make(chan struct{}),
		closeDone:   make(chan struct{}),
		apiOpened:   make(chan struct{}),
		apiFailed:   make(chan struct{}),
		apiBindAddr: cfg.APIAddr,
	}
	if l.clk == nil {
		l.clk = clock.WallClock
	}
	if cfg.limited() {
		l.limiter = rate.NewLimiter(cfg.APIRate, cfg.burst())
	}
	if cfg.APIMaxConns > 0 {
		l.sem = make(chan struct{}, cfg.APIMaxConns)
	}
	ctrlLn, err := listen("tcp", cfg.ControllerAddr)
	if err != nil {
		return nil, &PortError{Port: Controller, Op: opBind, Addr: cfg.ControllerAddr, Err: err}
	}
	l.ctrlLn, l.ctrlAddr = ctrlLn, ctrlLn.Addr()
	l.bound(Controller, l.ctrlAddr)
	if cfg.BindAPIEarly {
		apiLn, err := listen("tcp", cfg.APIAddr)
		if err != nil {
			_ = ctrlLn.Close()
			return nil, &PortError{Port: API, Op: opBind, Addr: cfg.APIAddr, Err: err}
		}
		l.apiLn, l.apiBindAddr = apiLn, apiLn.Addr().String()
		l.bound(API, apiLn.Addr())
	}
	l.wg.Add(1)
	go l.serve(&l.ctrl, ctrlLn, l.done, l.ctrlCh, nil)
	l.logPort(slog.LevelInfo, "port opened", Controller, l.ctrlAddr.String(), nil)
	return l, nil
}

// OpenAPIWhen opens the API port when ready closes (a gate's Unlocked()),
// as a call to OpenAPI would, with no goroutine of yours waiting for it;
// what names it for Detail ("opens once stable"). It may be called at any
// time after New.
//
// The open is tried once; if it fails, Failed closes and Cause returns the
// *PortError, and you may call OpenAPI again. Completed closes once the
// port is open. CloseAPI before ready closes does not cancel the open;
// Close does. Each call waits on its own channel; Detail names the last.
// A nil ready is an error satisfying errors.Is(err, errors.NotValid)
// (github.com/juju/errors); after Close, or a permanent accept failure,
// OpenAPIWhen returns what OpenAPI would.
func (l *Listener) OpenAPIWhen(what string, ready <-chan struct{}) error {
	if ready == nil {
		return jujuerrors.NotValidf("nil ready (must be a channel that closes when the API port may open)")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.endedLocked(); err != nil {
		return err
	}
	l.opensWhen = "opens when its open signal closes"
	if what != "" {
		l.opensWhen = "opens once " + what
	}
	l.whens.Add(1) // under mu with the listener not ended: Close's Wait comes after
	go l.openAPIWhen(ready)
	return nil
}

// openAPIWhen is OpenAPIWhen's goroutine; a failure goes to Failed.
func (l *Listener) openAPIWhen(ready <-chan struct{}) {
	defer l.whens.Done()
	select {
	case <-ready:
	case <-l.done:
		return
	}
	if err := l.OpenAPI(); err != nil {
		l.mu.Lock()
		l.failAPILocked(err)
		l.mu.Unlock()
	}
}

// failAPILocked closes apiFailed with err, unless the API port has opened
// or apiFailed is closed already. l.mu must be held.
func (l *Listener) failAPILocked(err error) {
	if isClosed(l.apiOpened) || isClosed(l.apiFailed) {
		return
	}
	l.apiErr = err
	close(l.apiFailed)
}

// Completed returns a channel that is closed the first time the API port
// opens, by OpenAPI or OpenAPIWhen.
func (l *Listener) Completed() <-chan struct{} { return l.apiOpened }

// Failed returns a channel that is closed, if the API port has not opened
// yet, when an open asked for by OpenAPIWhen fails or the listener
// ends (Close, or a permanent accept failure); Cause then says why. A
// failed OpenAPI call does not close it: its caller has the error. A later
// OpenAPI may still open the port; Failed stays closed.
func (l *Listener) Failed() <-chan struct{} { return l.apiFailed }

// Cause returns why Failed closed: a *PortError matching ErrBind, an error
// matching net.ErrClosed, or the listener's accept failure. It is nil
// while Failed is open.
func (l *Listener) Cause() error {
	if !isClosed(l.apiFailed) {
		return nil
	}
	return l.apiErr
}

// Detail says what the API port waits for, in an operator's words, for a
// board to show while it is not open: "opens once stable" (what the last
// OpenAPIWhen named; "opens when its open signal closes" if it named
// nothing), or "waits to be opened" before any OpenAPIWhen, with the
// address once bound early; "" once it has opened.
func (l *Listener) Detail() string {
	if isClosed(l.apiOpened) {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.opensWhen
	if d == "" {
		d = "waits to be opened"
	}
	if l.apiLn != nil {
		d += ", bound at " + l.apiLn.Addr().String()
	}
	return d
}

// bound logs a port's bound address and reports it to OnBound, in New.
func (l *Listener) bound(p Port, addr net.Addr) {
	l.logPort(slog.LevelInfo, "port bound", p, addr.String(), nil)
	if l.cfg.OnBound != nil {
		l.cfg.OnBound(p, addr)
	}
}

// boundAPI is bound for the API port bound by op. It reports false,
// having logged nothing or called nothing more, if the listener has ended:
// checked before the record, before OnBound and after it.
func (l *Listener) boundAPI(op *apiOp, addr net.Addr) bool {
	if !l.mark(op, opCommitted) {
		return false
	}
	l.logPort(slog.LevelInfo, "port bound", API, addr.String(), nil)
	if l.cfg.OnBound == nil {
		return true
	}
	if !l.mark(op, opInHook) {
		return false
	}
	l.cfg.OnBound(API, addr)
	return l.mark(op, opCommitted)
}

// mark moves op to stage, unless the listener has ended: then it reports
// false, and op must stop without a record.
func (l *Listener) mark(op *apiOp, stage opStage) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endedLocked() != nil {
		return false
	}
	op.stage = stage
	return true
}

// beginOp registers an API-port call (openMu held) at stage, unless the
// listener has ended: then it returns what OpenAPI returns.
func (l *Listener) beginOp(stage opStage) (*apiOp, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.endedLocked(); err != nil {
		return nil, err
	}
	l.op = &apiOp{done: make(chan struct{}), stage: stage}
	return l.op, nil
}

// endOp ends the call beginOp registered.
func (l *Listener) endOp(op *apiOp) {
	l.mu.Lock()
	l.op = nil
	l.mu.Unlock()
	close(op.done)
}

// logPort logs a port's transition, with its address and error if any.
func (l *Listener) logPort(level slog.Level, msg string, p Port, addr string, err error) {
	log := l.cfg.Logger
	if log == nil {
		return
	}
	if err != nil {
		log.LogAttrs(context.Background(), level, msg,
			slog.String("port", p.String()), slog.String("addr", addr), slog.Any("err", err))
		return
	}
	log.LogAttrs(context.Background(), level, msg, slog.String("port", p.String()), slog.String("addr", addr))
}

// Accept waits for and returns the next connection from either port,
// taking a waiting controller connection first. While the API port is
// closed or throttled it blocks rather than failing, so http.Server.Serve
// keeps serving. After Close it returns an error matching net.ErrClosed;
// after a permanent accept error, a *PortError matching ErrAcceptFailed.
func (l *Listener) Accept() (net.Conn, error) {
	var c *conn
	select {
	case c = <-l.ctrlCh:
	default:
		select {
		case c = <-l.ctrlCh:
		case c = <-l.apiCh:
		case <-l.done:
			return nil, l.doneErr()
		}
	}
	// Once the listener has ended, Accept hands out no more connections.
	select {
	case <-l.done:
		_ = c.Close()
		c.state.refused.Add(1)
		return nil, l.doneErr()
	default:
	}
	return c, nil
}

// doneErr is what Accept returns once done is closed: the failure, unless
// Close has been called since (then, as for any closed net.Listener, an
// error matching net.ErrClosed).
func (l *Listener) doneErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.failErr == nil {
		return &net.OpError{Op: "accept", Net: "tcp", Addr: l.ctrlAddr, Err: net.ErrClosed}
	}
	return l.failErr
}

// Close stops both ports and unblocks every pending Accept. It closes the
// API socket even if the API port was never opened, closes connections
// accepted but not yet handed out, and returns once the accept goroutines
// have exited and an OpenAPI or CloseAPI in flight has returned: from then
// on the listener logs nothing, calls OnBound no more and counts nothing
// more itself (connections Accept returned stay open; Conns falls as they
// close). Close is idempotent and safe to call concurrently; calls after
// the first return nil. It may be called from OnBound: it then does not
// wait for the call OnBound runs in, which releases the API port it bound
// and does nothing more (Cause matches net.ErrClosed).
func (l *Listener) Close() error { return l.end(nil) }

// end is the listener's one close path, for Close (cause nil) and a
// permanent accept failure (the *PortError); DESIGN.md, "The close path".
func (l *Listener) end(cause error) error {
	closing := cause == nil
	l.mu.Lock()
	if closing && l.closed {
		l.mu.Unlock()
		<-l.closeDone
		return nil
	}
	first := l.endedLocked() == nil
	var opDone chan struct{} // an API-port call Close must wait for
	inHook := false
	switch {
	case closing:
		l.closed = true
		// An API-port call committed before closed was set ends before
		// Close returns; any other finds closed set and stops silently.
		if op := l.op; op != nil {
			switch op.stage {
			case opCommitted:
				opDone = op.done
			case opInHook:
				inHook = true
			}
		}
	case first:
		l.failErr = cause
	}
	l.mu.Unlock()

	var err error
	if first {
		_, err = l.stopAPI()
		why := cause
		if closing {
			why = errOpenClosed
		}
		l.mu.Lock()
		l.failAPILocked(why) // the API port never opened, and now never will
		l.mu.Unlock()
		close(l.done)
	}
	if closing {
		if cerr := l.closeController(opDone, inHook); cerr != nil {
			err = cerr
		}
		close(l.closeDone)
	}
	return err
}

// closeController is the rest of the first Close: it closes the
// controller socket and waits for the accept goroutines, opDone (if not
// nil) and, unless inHook, the OpenAPIWhen watchers (DESIGN.md).
func (l *Listener) closeController(opDone <-chan struct{}, inHook bool) error {
	<-l.done
	err := closeSocket(l.ctrlLn)
	l.wg.Wait()
	if opDone != nil {
		<-opDone
	}
	if !inHook {
		l.whens.Wait()
	}
	l.logPort(slog.LevelInfo, "port closed", Controller, l.ctrlAddr.String(), nil)
	return err
}

// stopAPI is the one way the API port stops (CloseAPI, Close, a
// failure): it ends the session, then releases the socket, even one bound
// early and never opened (DESIGN.md, "Stopping the API port"). It returns
// the session's exited channel (nil if none was open).
func (l *Listener) stopAPI() (exited <-chan struct{}, err error) {
	l.mu.Lock()
	ln, sess := l.apiLn, l.apiSess
	l.apiLn, l.apiSess = nil, nil
	l.mu.Unlock()
	if sess != nil {
		close(sess.quit)
		exited = sess.exited
	}
	if ln != nil {
		err = closeSocket(ln)
		l.logPort(slog.LevelInfo, "port closed", API, ln.Addr().String(), nil)
	}
	return exited, err
}

// closeSocket closes ln, ignoring "already closed" (after a failure).
func closeSocket(ln net.Listener) error {
	if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// Addr returns the controller port's bound address.
func (l *Listener) Addr() net.Addr { return l.ctrlAddr }

// APIAddr returns the API port's bound address, or nil while it is not
// bound (before OpenAPI unless BindAPIEarly, after CloseAPI, after Close).
func (l *Listener) APIAddr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.apiLn == nil {
		return nil
	}
	return l.apiLn.Addr()
}

// OpenAPI binds the API port (unless it is already bound) and starts
// accepting on it. It is idempotent: on an open port it does nothing and
// returns nil. The first bind uses Config.APIAddr; a bind after CloseAPI
// reuses the address first bound, so a port-0 API port keeps its number.
// A bind failure is returned as a *PortError matching ErrBind: the
// listener stays controller-only and the caller may retry. After Close it
// binds nothing and returns an error matching net.ErrClosed; after a
// permanent accept failure it returns that failure.
func (l *Listener) OpenAPI() error {
	l.openMu.Lock()
	defer l.openMu.Unlock()
	op, err := l.beginOp(opBinding)
	if err != nil {
		return err
	}
	defer l.endOp(op)
	l.mu.Lock()
	open, ln, addr := l.apiSess != nil, l.apiLn, l.apiBindAddr
	l.mu.Unlock()
	if open {
		return nil
	}

	if ln == nil {
		if ln, err = l.listen("tcp", addr); err != nil {
			if !l.mark(op, opCommitted) {
				return l.endedErr() // the listener ended meanwhile
			}
			err = &PortError{Port: API, Op: opBind, Addr: addr, Err: err}
			l.logPort(slog.LevelError, "port failed to open", API, addr, err)
			return err
		}
		if !l.boundAPI(op, ln.Addr()) {
			_ = ln.Close() // the listener ended meanwhile
			return l.endedErr()
		}
	}

	if err := l.startAPI(ln); err != nil {
		return err
	}
	l.logPort(slog.LevelInfo, "port opened", API, ln.Addr().String(), nil)
	return nil
}

// endedErr is endedLocked, taking mu.
func (l *Listener) endedErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endedLocked()
}

// startAPI starts the API port's accept loop on ln, unless the listener
// has ended meanwhile.
func (l *Listener) startAPI(ln net.Listener) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.endedLocked(); err != nil {
		// The listener ended while we were binding: end may have
		// stopped the API port already, so ln must not become its session.
		_ = ln.Close()
		return err
	}
	l.apiLn, l.apiBindAddr = ln, ln.Addr().String()
	sess := &session{quit: make(chan struct{}), exited: make(chan struct{})}
	l.apiSess = sess
	l.wg.Add(1) // under mu with the listener not ended: Close's Wait comes after
	go l.serve(&l.api, ln, sess.quit, l.apiCh, sess.exited)
	if !isClosed(l.apiOpened) {
		close(l.apiOpened)
	}
	return nil
}

// endedLocked returns nil while the listener runs, else what OpenAPI
// returns: errOpenClosed after Close, the failure after a failure. l.mu
// must be held.
func (l *Listener) endedLocked() error {
	if l.closed {
		return errOpenClosed
	}
	return l.failErr
}

var errOpenClosed = fmt.Errorf("listener: open API port: %w", net.ErrClosed)

// CloseAPI takes the listener back to controller-only: it stops accepting
// on the API port and releases its socket, so new agents are refused at
// once rather than parked in the kernel's accept queue (even with
// BindAPIEarly, which governs only New). Connections already accepted live
// on (and keep their APIMaxConns slots). OpenAPI opens the port again at
// the same address, or fails with ErrBind if another socket took the
// freed port meanwhile (DESIGN.md, "CloseAPI"). CloseAPI on a port that
// is not bound, or after Close, does nothing.
func (l *Listener) CloseAPI() error {
	l.openMu.Lock()
	defer l.openMu.Unlock()
	op, err := l.beginOp(opCommitted)
	if err != nil {
		return nil // the listener has ended: the port is closed already
	}
	defer l.endOp(op)
	exited, err := l.stopAPI()
	if exited != nil {
		<-exited
	}
	return err
}

// serve is one port's accept loop. quit ends it: the listener's done for
// the controller port, the session's quit for the API port. out is the
// port's hand-off channel; exited, if not nil, is closed on return.
func (l *Listener) serve(p *portState, ln net.Listener, quit <-chan struct{}, out chan<- *conn, exited chan struct{}) {
	defer l.wg.Done()
	if exited != nil {
		defer close(exited)
	}
	var sem chan struct{}
	var limiter *rate.Limiter
	if p.port == API {
		sem, limiter = l.sem, l.limiter
	}
	retry := backoff.Backoff{Policy: acceptBackoff}
	for {
		if sem != nil && !l.acquire(p, sem, quit) {
			return
		}
		c, err := ln.Accept()
		if err != nil {
			if sem != nil {
				<-sem
			}
			if !l.retryAccept(p, ln, err, &retry, quit) {
				return
			}
			continue
		}
		retry.Reset()
		p.accepted.Add(1)
		if limiter != nil && !l.throttle(p, limiter, quit) {
			_ = c.Close()
			p.refused.Add(1)
			if sem != nil {
				<-sem
			}
			return
		}
		wc := &conn{Conn: c, state: p, sem: sem}
		p.conns.Add(1)
		select {
		case out <- wc:
		case <-quit:
			_ = wc.Close()
			p.refused.Add(1)
			return
		}
	}
}

// retryAccept handles an accept error: after quit it is only the closing
// socket's echo, so the loop stops; a temporary error is counted and
// backed off; anything else fails the listener. It reports whether the
// loop should accept again.
func (l *Listener) retryAccept(p *portState, ln net.Listener, err error, retry *backoff.Backoff, quit <-chan struct{}) bool {
	if isClosed(quit) {
		return false
	}
	if !temporary(err) {
		perr := &PortError{Port: p.port, Op: opAccept, Addr: ln.Addr().String(), Err: err}
		l.logPort(slog.LevelError, "accept failed", p.port, perr.Addr, err)
		l.end(perr)
		return false
	}
	p.noteTempErr(err, l.clk.Now())
	return backoff.SleepUntil(quit, l.clk, retry.Next())
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// throttle takes a token for the connection just accepted, waiting on the
// injected clock if the bucket is empty. Only the API goroutine calls it.
func (l *Listener) throttle(p *portState, limiter *rate.Limiter, quit <-chan struct{}) bool {
	now := l.clk.Now()
	r := limiter.ReserveN(now, 1) // n=1 never exceeds the burst, so r.OK()
	d := r.DelayFrom(now)
	if d <= 0 {
		return true
	}
	p.rateLimited.Add(1)
	ok := backoff.SleepUntil(quit, l.clk, d)
	end := l.clk.Now()
	p.throttled.Add(int64(end.Sub(now)))
	if !ok {
		r.CancelAt(end) // the conn is dropped: give its token back
	}
	return ok
}

// acquire takes an APIMaxConns slot before accepting, so agents beyond
// the cap wait in the kernel's queue rather than in ours.
func (l *Listener) acquire(p *portState, sem chan struct{}, quit <-chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
	}
	start := l.clk.Now()
	select {
	case sem <- struct{}{}:
		p.throttled.Add(int64(l.clk.Now().Sub(start)))
		return true
	case <-quit:
		return false
	}
}

// temporary reports whether an accept error is worth retrying: the process
// or system is out of descriptors or buffers, a handshake was aborted by
// the peer, or a deadline passed. Anything else is permanent.
func temporary(err error) bool {
	for _, errno := range []syscall.Errno{
		syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ECONNRESET,
		syscall.ENOBUFS, syscall.ENOMEM,
	} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func (p *portState) noteTempErr(err error, at time.Time) {
	p.tempErrs.Add(1)
	p.errMu.Lock()
	p.lastTempErr, p.lastTempAt = err, at
	p.errMu.Unlock()
}

// conn is a connection accepted by a Listener. It remembers its port and
// releases its APIMaxConns slot exactly once, however often it is closed.
type conn struct {
	net.Conn
	state  *portState
	sem    chan struct{}
	closed atomic.Bool
}

// Close closes the connection and, the first time, releases its slot.
func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.state.conns.Add(-1)
		if c.sem != nil {
			<-c.sem
		}
	}
	return err
}

// ReadFrom lets io.Copy (and http.ServeContent) use the inner connection's
// sendfile/splice path through the wrapper.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// CloseWrite half-closes the inner connection when it supports that (a
// *net.TCPConn does); *tls.Conn.CloseWrite relies on it.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// writerOnly hides ReadFrom so io.Copy does not recurse.
type writerOnly struct{ io.Writer }
