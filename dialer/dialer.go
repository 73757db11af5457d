package dialer

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// Policy decides which addresses a Dial may use.
type Policy int

const (
	// RequireLocalWhenReady, the zero value and the default, dials only
	// this machine's controller once Config.LocalReady has closed, retrying
	// it until ctx ends, never a peer. Before that, each Dial waits up to
	// LocalReadyGrace for LocalReady and then dials the peers (so enable-ha
	// cannot deadlock: README.md).
	RequireLocalWhenReady Policy = iota

	// PreferLocal dials the local addresses first and the peers after them,
	// staggered by HeadStart, whatever LocalReady says (its closing only
	// cuts a backoff pause short). With LocalPort 0 it dials the peers
	// only: this is the policy of a machine that runs no controller.
	PreferLocal

	// RequireLocal dials only this machine's controller, whatever
	// LocalReady says. A new controller that must report to a peer before
	// it can serve deadlocks under it: use it only where the local server
	// cannot depend on a peer.
	RequireLocal
)

// String returns "require-local-when-ready", "prefer-local" or
// "require-local".
func (p Policy) String() string {
	switch p {
	case RequireLocalWhenReady:
		return "require-local-when-ready"
	case PreferLocal:
		return "prefer-local"
	case RequireLocal:
		return "require-local"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// Route says where a connection went.
type Route struct {
	// Addr is the address dialled: "127.0.0.1:port" or "[::1]:port" for
	// the local controller, otherwise a peer address as Remote gave it.
	Addr string
	// Local is true when Addr is this machine's own controller.
	Local bool
	// LocalReady is Config.LocalReady (nil when LocalPort is 0): a caller
	// holding a peer connection selects on it, then closes that connection
	// and dials again, which goes local.
	LocalReady <-chan struct{}
}

// Dialer dials this machine's controller or its peers according to a
// Policy. Make it with New; its methods are safe for concurrent use, and
// concurrent Dials share the servers' "try again later" hints.
type Dialer struct {
	cfg   Config
	local []string       // literal loopback addresses, IPv4 first; empty with LocalPort 0
	retry backoff.Policy // the pause between failed rounds

	// The calls' counts, read by Report and by nothing else.
	localDials, peerDials, fallbacks, failures atomic.Uint64
	lastRoute                                  atomic.Int32 // the routeKind last logged

	// home is Completed; atHome is set just before it closes, so that
	// later calls skip the Once.
	home     chan struct{}
	homeOnce sync.Once
	atHome   atomic.Bool

	// mu guards holdoff: addresses whose server asked for a pause, shared by
	// every Dial so that a caller looping on Dial does not hammer them.
	mu      sync.Mutex
	holdoff map[string]holdoff
}

type holdoff struct {
	until time.Time
	err   error // the failure that carried the hint
}

// New validates cfg, applies its defaults and returns a Dialer.
func New(cfg Config) (*Dialer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	d := &Dialer{cfg: cfg, holdoff: make(map[string]holdoff)}
	d.retry = backoff.Policy{Min: cfg.MinBackoff, Max: cfg.MaxBackoff, Jitter: 0.5} // see Config.MinBackoff
	if cfg.LocalPort != 0 {
		port := strconv.Itoa(cfg.LocalPort)
		// Literal IPs, never "localhost" (DESIGN.md, "Loopback").
		d.local = []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)}
		d.home = make(chan struct{})
	}
	return d, nil
}

// LocalReady returns Config.LocalReady, or nil when LocalPort is 0. An
// adapter that holds connections selects on it to move them home;
// Route.LocalReady is the same channel.
func (d *Dialer) LocalReady() <-chan struct{} {
	if d.cfg.LocalPort == 0 {
		return nil
	}
	return d.cfg.LocalReady
}

// Dial connects to the controller chosen by the policy. It keeps trying,
// with jittered capped exponential backoff between rounds, until it
// connects or ctx ends; it then returns a *DialError that wraps ctx.Err()
// and names every address tried with its last failure. See Connect for the
// rounds, the head starts and the servers' RetryAfter hints.
func (d *Dialer) Dial(ctx context.Context) (net.Conn, Route, error) {
	return Connect(ctx, d, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.cfg.DialContext(ctx, "tcp", addr)
	})
}

// Connect is Dial for clients that are not a bare net.Conn (TLS,
// websocket, RPC): open makes one connection to addr and must return
// promptly once its ctx ends. A round races its attempts: the first
// success wins, and every other value open returned is closed before
// Connect returns. A nil T (by ==) without an error counts as that address
// failing. A non-nil value beside an error is closed too, unless T is an
// interface type (DESIGN.md, "Connect's values").
//
// Each round tries its candidates in parallel, staggered: the next starts
// when the previous attempt fails or HeadStart after it started. Local
// candidates are 127.0.0.1 then [::1]; peers are shuffled afresh for every
// round. An error from open that has a method RetryAfter() time.Duration
// (a server's "try again later") keeps its address out of later rounds,
// and later Dials, for exactly that long (no jitter added: DESIGN.md).
//
// A nil d or open, or a Dialer not made by New, is reported as an error
// satisfying errors.Is(err, errors.NotValid) (github.com/juju/errors).
func Connect[T interface {
	io.Closer
	comparable
}](ctx context.Context, d *Dialer, open func(ctx context.Context, addr string) (T, error)) (T, Route, error) {
	var zero T
	if d == nil {
		return zero, Route{}, jujuerrors.NotValidf("nil Dialer")
	}
	if open == nil {
		return zero, Route{}, jujuerrors.NotValidf("nil open func")
	}
	if d.holdoff == nil {
		return zero, Route{}, jujuerrors.NotValidf("Dialer not made by New")
	}
	c := &connector[T]{
		d: d, open: open, index: make(map[string]int), real: make(map[string]error),
		retry: backoff.Backoff{Policy: d.retry},
	}
	return c.connect(ctx)
}

// connector is the state of one Dial or Connect call; it is used by one
// goroutine only (the attempts report back over a channel).
type connector[T client] struct {
	d        *Dialer
	open     func(context.Context, string) (T, error)
	attempts []Attempt
	index    map[string]int   // addr → position in attempts
	real     map[string]error // addr → its last failure that was not a ctx ending

	ready     bool            // LocalReady has been seen closed
	graceOver bool            // LocalReadyGrace ran out before LocalReady closed
	retry     backoff.Backoff // failed rounds (since local became ready)
	fellBack  bool            // a peer has been dialled although there is a local controller
}

type outcome int

const (
	won        outcome = iota
	allFailed          // every attempt of the round failed
	readyFired         // LocalReady closed: switch to local only
	ctxDone
)

// connect runs rounds, with a pause after each that fails, until one wins
// or ctx ends.
func (c *connector[T]) connect(ctx context.Context) (T, Route, error) {
	var zero T
	c.ready = isClosed(c.d.cfg.LocalReady)
	for {
		if err := ctxErr(ctx); err != nil {
			return zero, Route{}, c.fail(err)
		}
		p, ok := c.plan(ctx)
		if !ok {
			return zero, Route{}, c.fail(ctx.Err())
		}
		eligible, heldFor := c.eligible(p.cands)
		if len(eligible) > 0 {
			v, addr, out := c.race(ctx, eligible, p.abort)
			switch out {
			case won:
				return v, c.won(addr), nil
			case readyFired:
				c.localReady()
				continue
			case ctxDone:
				return zero, Route{}, c.fail(ctx.Err())
			}
		}
		pause := heldFor // every candidate is held off by a RetryAfter hint
		if len(eligible) > 0 || pause <= 0 {
			pause = c.retry.Next()
		}
		switch c.pause(ctx, pause, p.wake) {
		case readyFired:
			c.localReady()
		case ctxDone:
			return zero, Route{}, c.fail(ctx.Err())
		}
	}
}

// localReady switches the call to local only, with a fresh backoff.
func (c *connector[T]) localReady() {
	c.ready = true
	c.retry.Reset()
}

// roundPlan is what a round dials and what may interrupt it.
type roundPlan struct {
	cands []string
	// wake ends the backoff pause after the round when LocalReady closes;
	// abort also cancels the round in flight. Both are nil once local is
	// ready.
	wake, abort <-chan struct{}
}

// plan picks the next round's candidates under the policy. Under
// RequireLocalWhenReady the first round waits up to LocalReadyGrace for
// LocalReady; ok is false if ctx ended during that wait.
func (c *connector[T]) plan(ctx context.Context) (p roundPlan, ok bool) {
	d, cfg := c.d, &c.d.cfg
	switch cfg.Policy {
	case RequireLocal:
		p.cands = d.local
	case RequireLocalWhenReady:
		if !c.ready && !c.graceOver {
			switch c.pause(ctx, cfg.LocalReadyGrace, cfg.LocalReady) {
			case readyFired:
				c.localReady()
			case ctxDone:
				return p, false
			default:
				c.graceOver = true
			}
		}
		if c.ready {
			p.cands = d.local
		} else {
			p.cands = d.peers()
			p.wake, p.abort = cfg.LocalReady, cfg.LocalReady
		}
	case PreferLocal:
		p.cands = append(slices.Clip(d.local), d.peers()...)
		if !c.ready {
			p.wake = cfg.LocalReady
		}
	}
	return p, true
}

// result is one attempt's report to its round.
type result[T any] struct {
	addr string
	v    T
	err  error
}

// round is one race over a round's candidates (DESIGN.md, "Rounds"): the
// attempts only report over results; race does all the bookkeeping.
type round[T client] struct {
	c        *connector[T]
	addrs    []string
	abort    <-chan struct{}
	ctx      context.Context // the attempts': cancelled when the round ends
	cancel   context.CancelFunc
	results  chan result[T] // buffered: an attempt never blocks reporting
	next     int            // addrs[next] is the next to start
	inflight int            // attempts started and not yet reported

	stagger  clock.Timer      // the next attempt's head start; nil until first armed
	staggerC <-chan time.Time // stagger's channel while armed, else nil
}

// race runs one round over addrs and returns the winner, if any. It
// returns only after every attempt it started has finished, having closed
// every connection but the winner's.
func (c *connector[T]) race(ctx context.Context, addrs []string, abort <-chan struct{}) (T, string, outcome) {
	r := &round[T]{c: c, addrs: addrs, abort: abort, results: make(chan result[T], len(addrs))}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.release()
	start := true // the next attempt, now
	for {
		if start && !r.launch() {
			return r.stop(readyFired)
		}
		start = false
		select {
		case res := <-r.results:
			r.inflight--
			if res.err == nil {
				if ctx.Err() != nil {
					// ctx's ending wins, whichever case select picked.
					closeQuietly(res.v)
					return r.stop(ctxDone)
				}
				if isClosed(abort) {
					// So does LocalReady over a peer's connection.
					closeQuietly(res.v)
					return r.stop(readyFired)
				}
				r.drain()
				return res.v, res.addr, won
			}
			c.failed(res.addr, res.err, r.ctx.Err() != nil)
			switch {
			case r.next < len(addrs):
				start = true // a failure hands over at once, not after the head start
			case r.inflight == 0:
				return r.stop(allFailed)
			}
		case <-r.staggerC:
			start = true
		case <-abort:
			return r.stop(readyFired)
		case <-ctx.Done():
			return r.stop(ctxDone)
		}
	}
}

// launch starts the next attempt; it reports false, starting nothing,
// once abort has closed (why here: DESIGN.md, "Rounds").
func (r *round[T]) launch() bool {
	// Arm (or stop) the head-start timer before the attempt starts, so
	// anyone who observes the attempt also observes the timer it implies.
	r.armStagger()
	if isClosed(r.abort) {
		return false
	}
	addr := r.addrs[r.next]
	r.next++
	r.inflight++
	r.c.attempt(addr).Tries++
	if c := r.c; !c.fellBack && c.d.cfg.LocalPort != 0 && !c.d.isLocal(addr) {
		c.fellBack = true
		c.d.fallbacks.Add(1)
	}
	// The attempt gets only what it needs, not r, so that r stays on
	// race's stack.
	go openOne(r.ctx, r.c.open, addr, r.results)
	return true
}

// armStagger arms the head start of the attempt after the one about to
// start, or stops the timer if that one is the last.
func (r *round[T]) armStagger() {
	switch {
	case r.next+1 < len(r.addrs):
		d := r.c.d.cfg.HeadStart
		if r.stagger == nil {
			r.stagger = r.c.d.cfg.Clock.NewTimer(d)
		} else {
			stopTimer(r.stagger)
			r.stagger.Reset(d)
		}
		r.staggerC = r.stagger.Chan()
	case r.stagger != nil:
		stopTimer(r.stagger)
		r.staggerC = nil
	}
}

// openOne is one attempt, run in its own goroutine; it only reports.
func openOne[T client](ctx context.Context, open func(context.Context, string) (T, error), addr string, results chan<- result[T]) {
	v, err := open(ctx, addr)
	var zero T
	switch {
	case err == nil && isNil(v):
		err = errNilConn
	case err != nil && any(zero) != nil:
		// A value beside an error is closed, unless T is an interface type
		// (DESIGN.md, "Connect's values").
		closeQuietly(v)
	}
	results <- result[T]{addr, v, err}
}

// stop ends the round without a winner.
func (r *round[T]) stop(out outcome) (T, string, outcome) {
	r.drain()
	var zero T
	return zero, "", out
}

// drain cancels the attempts still running, waits for each, and closes
// any that connected anyway: the losers never outlive the round.
func (r *round[T]) drain() {
	r.cancel()
	for ; r.inflight > 0; r.inflight-- {
		res := <-r.results
		if res.err == nil {
			closeQuietly(res.v)
		} else {
			r.c.failed(res.addr, res.err, true)
		}
	}
}

// release frees the round's context and timer.
func (r *round[T]) release() {
	r.cancel()
	if r.stagger != nil {
		r.stagger.Stop()
	}
}

// pause waits for d, for wake to close, or for ctx to end. Driven by the
// channel, not by polling: LocalReady closing during a pause (or the grace
// period) is seen at once.
func (c *connector[T]) pause(ctx context.Context, d time.Duration, wake <-chan struct{}) outcome {
	t := c.d.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return allFailed
	case <-wake:
		return readyFired
	case <-ctx.Done():
		return ctxDone
	}
}

// eligible returns the candidates no server has asked to leave alone and,
// when there is none, how long until the first of them may be dialled.
func (c *connector[T]) eligible(cands []string) ([]string, time.Duration) {
	d := c.d
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(cands))
	var first time.Duration
	for _, addr := range cands {
		h, ok := d.holdoff[addr]
		if ok && now.Before(h.until) {
			c.skipped(addr, h.err)
			if wait := h.until.Sub(now); first == 0 || wait < first {
				first = wait
			}
			continue
		}
		delete(d.holdoff, addr) // its hint, if any, has run out
		out = append(out, addr)
	}
	return out, first
}

// retryAfterer is a server's "try again later", found with errors.As on
// the error of an attempt (for example a refusal while it is upgrading).
type retryAfterer interface{ RetryAfter() time.Duration }

// maxHint bounds a RetryAfter hint (about a century) so that the hold-off
// time cannot overflow; ctx ends any wait long before.
const maxHint = 1 << 61

var errNilConn = errors.New("dialer: open returned neither a connection nor an error")

func (c *connector[T]) attempt(addr string) *Attempt {
	i, ok := c.index[addr]
	if !ok {
		i = len(c.attempts)
		c.index[addr] = i
		c.attempts = append(c.attempts, Attempt{Addr: addr, Local: c.d.isLocal(addr)})
	}
	return &c.attempts[i]
}

func (c *connector[T]) skipped(addr string, err error) {
	if a := c.attempt(addr); a.Err == nil {
		a.Err = err
	}
}

// failed records addr's failure and any RetryAfter hint it carries.
// cancelled marks an attempt cut short because the round or ctx ended: its
// error says nothing about the address, so an earlier real failure is kept.
func (c *connector[T]) failed(addr string, err error, cancelled bool) {
	a := c.attempt(addr)
	if !cancelled || a.Err == nil {
		a.Err = err
	}
	if !endedCtx(err) {
		c.real[addr] = err
	}
	var ra retryAfterer
	if !errors.As(err, &ra) {
		return
	}
	hint := min(ra.RetryAfter(), maxHint)
	if hint <= 0 {
		return
	}
	// Exactly the hint, no jitter (DESIGN.md, "RetryAfter hints").
	until := c.d.cfg.Clock.Now().Add(hint)
	c.d.mu.Lock()
	if h, ok := c.d.holdoff[addr]; !ok || until.After(h.until) {
		c.d.holdoff[addr] = holdoff{until: until, err: err}
	}
	c.d.mu.Unlock()
}

// fail counts a failed call and returns its *DialError, which wraps err.
func (c *connector[T]) fail(err error) error {
	c.d.failures.Add(1)
	cfg := &c.d.cfg
	attempts := slices.Clone(c.attempts)
	for i, a := range attempts {
		// An attempt can see ctx's deadline a moment before ctx.Err() is
		// set; name the address's last real failure rather than the ending.
		if real := c.real[a.Addr]; real != nil && endedCtx(a.Err) {
			attempts[i].Err = real
		}
	}
	return &DialError{
		Policy:        cfg.Policy,
		Attempts:      attempts,
		LocalNotReady: cfg.Policy == RequireLocalWhenReady && !isClosed(cfg.LocalReady),
		Err:           err,
	}
}

// peers returns Remote's addresses, without duplicates, blanks or this
// machine's loopback addresses, in a fresh random order.
func (d *Dialer) peers() []string {
	if d.cfg.Remote == nil {
		return nil
	}
	raw := d.cfg.Remote()
	out := make([]string, 0, len(raw))
	for _, addr := range raw {
		if addr == "" || d.isLocal(addr) || slices.Contains(out, addr) {
			continue
		}
		out = append(out, addr)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (d *Dialer) isLocal(addr string) bool { return slices.Contains(d.local, addr) }

// endedCtx reports whether err only says that a context or deadline ended
// (a net.Dialer says "i/o timeout" at ctx's deadline).
func endedCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's (wall-clock)
// deadline has passed, before ctx's own timer sets ctx.Err().
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false // also for a nil channel: never ready
	}
}

// client is what Connect races: an io.Closer that == tells from its nil (a
// pointer or an interface type).
type client interface {
	io.Closer
	comparable
}

func closeQuietly[T client](v T) {
	if !isNil(v) {
		_ = v.Close()
	}
}

// isNil reports whether v is T's nil, a typed nil pointer included
// (DESIGN.md, "Connect's values").
func isNil[T comparable](v T) bool {
	var zero T
	return v == zero
}

// stopTimer stops t and drops a fired but unread value, so that a later
// Reset cannot deliver a stale tick (and a testclock timer cannot block).
func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.Chan():
		default:
		}
	}
}
