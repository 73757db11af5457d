package leasetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Op names the Store methods a fault applies to; values combine with |.
type Op uint8

const (
	OpClaim Op = 1 << iota
	OpExtend
	OpRevoke
	// AnyOp is every method.
	AnyOp = OpClaim | OpExtend | OpRevoke
)

func (op Op) String() string {
	switch op {
	case OpClaim:
		return "claim"
	case OpExtend:
		return "extend"
	case OpRevoke:
		return "revoke"
	}
	return fmt.Sprintf("Op(%#x)", uint8(op))
}

// Fault is what a FaultStore does to one call.
type Fault int

const (
	// Pass forwards the call unchanged.
	Pass Fault = iota
	// Timeout does not forward the call and returns ErrInjectedTimeout:
	// an ambiguous error for a call the store never applied.
	Timeout
	// AppliedTimeout forwards the call and then, whatever the answer,
	// returns ErrInjectedTimeout: the store applied the call (an extend
	// really extended) but the caller cannot know.
	AppliedTimeout
	// Lost is a definitive loss: Extend and Revoke revoke the term in the
	// wrapped store and return leasestore.ErrNotHeld; Claim returns the bare
	// leasestore.ErrHeld (a holder the store does not name). An Extend's Lost
	// ends a term whose promise still stands — a store breaking its word,
	// on purpose — so a history of the run (leasetest/history) reports
	// NotLeaderWhilePromised.
	Lost
	// Hang does not forward the call and blocks until the call's ctx ends,
	// then returns an error wrapping ctx.Err(): a store that never answers.
	Hang
	// NotSent does not forward the call and returns an error matching
	// leasestore.ErrNotSent: a store that held the call back and sent nothing.
	NotSent
)

func (f Fault) String() string {
	switch f {
	case Pass:
		return "pass"
	case Timeout:
		return "timeout"
	case AppliedTimeout:
		return "applied-timeout"
	case Lost:
		return "lost"
	case Hang:
		return "hang"
	case NotSent:
		return "not-sent"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// ErrInjectedTimeout is the ambiguous error of the Timeout and
// AppliedTimeout faults: it matches leasestore.ErrUnconfirmed, and neither
// leasestore.ErrHeld nor leasestore.ErrNotHeld.
var ErrInjectedTimeout error = injectedTimeout{}

type injectedTimeout struct{}

func (injectedTimeout) Error() string        { return "leasetest: injected lease operation timeout" }
func (injectedTimeout) Is(target error) bool { return target == leasestore.ErrUnconfirmed }

var errInjectedNotSent = fmt.Errorf("leasetest: injected: %w", leasestore.ErrNotSent)

// FaultStore wraps a leasestore.Store and injects faults into its calls: faults
// queued with Next apply to the next calls, one each, before the standing
// fault set with Always. It also adds request and response latency on its
// clock. It counts the calls it answers, faults included, by the class of
// its answer (StoreReport). It is safe for concurrent use.
//
// A FaultStore is always a leasestore.LossNotifier and ReleaseWatcher,
// whatever it wraps (DESIGN.md): see Lost and WatchRelease.
type FaultStore struct {
	store leasestore.Store
	clk   clock.Clock
	count leasestore.Counters

	mu          sync.Mutex
	queued      map[Op][]Fault
	always      map[Op]Fault
	latency     time.Duration // request latency
	respLatency time.Duration
	calls       map[Op]int
	blocked     int
	// change is closed and replaced whenever blocked changes.
	change chan struct{}
	// lost and releases are the open Lost and WatchRelease channels.
	lost, releases watches
}

var _ interface {
	leasestore.Store
	leasestore.LossNotifier
	leasestore.ReleaseWatcher
	leasestore.Reporter
} = (*FaultStore)(nil)

// FaultStoreConfig is what a FaultStore is timed on. The zero value is
// ready to use: the wall clock.
type FaultStoreConfig struct {
	// Clock times the latency set with SetLatency. If it's nil,
	// clock.WallClock will be used.
	Clock clock.Clock
}

// NewFaultStore wraps store, timed on cfg.Clock. It starts with no faults.
func NewFaultStore(store leasestore.Store, cfg FaultStoreConfig) *FaultStore {
	if store == nil {
		panic("leasetest.NewFaultStore: nil store")
	}
	return &FaultStore{
		store:    store,
		clk:      cmp.Or[clock.Clock](cfg.Clock, clock.WallClock),
		queued:   make(map[Op][]Fault),
		always:   make(map[Op]Fault),
		calls:    make(map[Op]int),
		change:   make(chan struct{}),
		lost:     make(watches),
		releases: make(watches),
	}
}

// Next queues faults for the next calls of each method in ops, one fault
// per call, in order.
func (f *FaultStore) Next(ops Op, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range []Op{OpClaim, OpExtend, OpRevoke} {
		if ops&op != 0 {
			f.queued[op] = append(f.queued[op], faults...)
		}
	}
}

// Always sets the fault for every call of the methods in ops once their
// queued faults are used up; Always(AnyOp, Pass) heals the store. It does
// not clear queued faults.
func (f *FaultStore) Always(ops Op, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range []Op{OpClaim, OpExtend, OpRevoke} {
		if ops&op != 0 {
			f.always[op] = fault
		}
	}
}

// SetLatency adds latency on the clock to every call: request before the
// call reaches the wrapped store (or is faulted), response after the
// wrapped store has answered. A call whose ctx ends while it waits returns
// an error wrapping ctx.Err() — after the response wait, the store has
// applied the call: another ambiguous-but-applied outcome. Zeros remove the
// latency.
func (f *FaultStore) SetLatency(request, response time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency, f.respLatency = request, response
}

// Calls returns how many calls of the methods in ops the store has had.
func (f *FaultStore) Calls(ops Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for op, c := range f.calls {
		if ops&op != 0 {
			n += c
		}
	}
	return n
}

// WaitBlocked waits until at least n calls are blocked, waiting on latency
// or a Hang, or until ctx ends. Tests use it to know a call is in flight —
// and that the caller's own timers for it are armed — before they advance
// the clock. With a ctx that has already ended it polls: it returns nil
// only if n calls are blocked now.
func (f *FaultStore) WaitBlocked(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		blocked, change := f.blocked, f.change
		f.mu.Unlock()
		if blocked >= n {
			return nil
		}
		select {
		case <-change:
		case <-ctx.Done():
			return fmt.Errorf("leasetest: %d of %d calls blocked: %w", blocked, n, ctx.Err())
		}
	}
}

func (f *FaultStore) setBlocked(delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked += delta
	close(f.change)
	f.change = make(chan struct{})
}

// begin counts the call, applies latency and picks its fault.
func (f *FaultStore) begin(ctx context.Context, op Op) (Fault, error) {
	f.mu.Lock()
	f.calls[op]++
	fault := f.always[op]
	if q := f.queued[op]; len(q) > 0 {
		fault, f.queued[op] = q[0], q[1:]
	}
	latency := f.latency
	f.mu.Unlock()
	if latency > 0 {
		if err := f.block(ctx, latency); err != nil {
			return fault, fmt.Errorf("leasetest: %v waiting out injected latency: %w", op, err)
		}
	}
	if fault == Hang {
		return fault, fmt.Errorf("leasetest: injected hang of %v: %w", op, f.block(ctx, 0))
	}
	return fault, nil
}

// end applies the response latency to a call the wrapped store answered.
func (f *FaultStore) end(ctx context.Context, op Op) error {
	f.mu.Lock()
	latency := f.respLatency
	f.mu.Unlock()
	if latency <= 0 {
		return nil
	}
	if err := f.block(ctx, latency); err != nil {
		return fmt.Errorf("leasetest: %v applied, but its answer was lost: %w", op, err)
	}
	return nil
}

// block waits for d on the clock (0: forever) or for ctx, counted as
// blocked. Its timer is stopped when ctx ends first, so that it leaves no
// waiter on a testclock.
func (f *FaultStore) block(ctx context.Context, d time.Duration) error {
	var c <-chan time.Time
	if d > 0 {
		timer := f.clk.NewTimer(d)
		defer timer.Stop()
		c = timer.Chan()
	}
	f.setBlocked(1)
	defer f.setBlocked(-1)
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Claim implements leasestore.Store.
func (f *FaultStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
	return inject(ctx, f, OpClaim, leasestore.OpClaim, func() (leasestore.Grant, error) {
		return leasestore.Grant{}, leasestore.ErrHeld
	}, func() (leasestore.Grant, error) {
		return f.store.Claim(ctx, name, holder, d)
	})
}

// Extend implements leasestore.Store.
func (f *FaultStore) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (leasestore.Grant, error) {
	return inject(ctx, f, OpExtend, leasestore.OpExtend, func() (leasestore.Grant, error) {
		_ = f.store.Revoke(ctx, g) // the term is gone, whatever its state was
		return leasestore.Grant{}, injectedLoss(g)
	}, func() (leasestore.Grant, error) {
		return f.store.Extend(ctx, g, d)
	})
}

// Revoke implements leasestore.Store.
func (f *FaultStore) Revoke(ctx context.Context, g leasestore.Grant) error {
	_, err := inject(ctx, f, OpRevoke, leasestore.OpRevoke, func() (struct{}, error) {
		_ = f.store.Revoke(ctx, g)
		return struct{}{}, injectedLoss(g)
	}, func() (struct{}, error) {
		return struct{}{}, f.store.Revoke(ctx, g)
	})
	return err
}

// inject counts one call of op and applies its fault: lost answers a Lost
// fault, call forwards the call.
func inject[T any](ctx context.Context, f *FaultStore, op Op, sop leasestore.Op, lost, call func() (T, error)) (v T, err error) {
	done := f.count.Begin(sop)
	defer func() { done(err) }()
	var zero T
	fault, err := f.begin(ctx, op)
	if err != nil {
		return zero, err
	}
	switch fault {
	case Timeout:
		return zero, ErrInjectedTimeout
	case NotSent:
		return zero, errInjectedNotSent
	case Lost:
		return lost()
	}
	v, err = call()
	if fault == AppliedTimeout {
		return zero, ErrInjectedTimeout
	}
	if lerr := f.end(ctx, op); lerr != nil {
		return zero, lerr
	}
	return v, err
}

// StoreReport implements leasestore.Reporter: the calls the FaultStore
// answered, by the class of the answer it gave (a Timeout is ambiguous
// however the wrapped store answered), and those in flight — blocked on
// latency or a Hang included.
func (f *FaultStore) StoreReport() leasestore.Report { return f.count.StoreReport() }

// Lost implements leasestore.LossNotifier. The channel closes when the wrapped
// store's Lost channel for g does (if the wrapped store is a
// leasestore.LossNotifier; one goroutine watches it until ctx ends or it
// closes), or when SignalLost is called for g's lease. When ctx ends first
// it stays open. Faults do not apply to Lost.
func (f *FaultStore) Lost(ctx context.Context, g leasestore.Grant) <-chan struct{} {
	lost := make(chan struct{})
	if ctx.Err() != nil {
		return lost
	}
	w := f.open(f.lost, ctx, g.Name, func(error) { close(lost) })
	var inner <-chan struct{}
	if n, ok := f.store.(leasestore.LossNotifier); ok {
		inner = n.Lost(ctx, g)
	}
	if inner == nil {
		context.AfterFunc(ctx, func() { f.endWatch(f.lost, w, false, nil) })
		return lost
	}
	follow(f, f.lost, w, inner, func(struct{}) error { return nil })
	return lost
}

// SignalLost closes every open Lost channel of the named lease (one whose
// ctx has not ended), whether or not its term is over — a spurious signal,
// unless the test ended the term — and returns how many it closed. A
// lease.Tracker must answer it by asking the store, not by reporting a
// loss.
func (f *FaultStore) SignalLost(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost.endAll(name, nil)
}

var errWatchBroken = errors.New("leasetest: injected release watch failure")

var errNoReleaseWatch = errors.New("leasetest: the wrapped store is not a leasestore.ReleaseWatcher")

// WatchRelease implements leasestore.ReleaseWatcher: the channel yields what the
// wrapped store's watch of held yields, or an error at once if the wrapped
// store does not watch (a follower then polls, as it would on that store),
// or errWatchBroken when BreakReleaseWatches is called for the lease. When
// ctx ends first it yields nothing. Faults do not apply to WatchRelease.
func (f *FaultStore) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	ch := make(chan error, 1)
	if ctx.Err() != nil {
		return ch
	}
	w := f.open(f.releases, ctx, held.Name, func(err error) {
		if err != nil {
			ch <- err
		}
		close(ch)
	})
	rw, ok := f.store.(leasestore.ReleaseWatcher)
	if !ok {
		f.endWatch(f.releases, w, true, errNoReleaseWatch)
		return ch
	}
	follow(f, f.releases, w, rw.WatchRelease(ctx, held), func(err error) error { return err })
	return ch
}

// BreakReleaseWatches makes every open WatchRelease channel of the named
// lease (one whose ctx has not ended) yield errWatchBroken, and returns how
// many it broke. A lease.Tracker must answer it by polling, changing
// nothing it reports.
func (f *FaultStore) BreakReleaseWatches(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releases.endAll(name, errWatchBroken)
}

// watch is one channel Lost or WatchRelease handed out. It ends once;
// yield then gives the channel its end (Lost closes it; WatchRelease
// sends err unless nil, then closes it), unless ctx has ended first.
type watch struct {
	ctx   context.Context
	name  string
	yield func(err error)
	gone  chan struct{} // closed when the watch ends
}

// watches are the open watches of one kind, by lease name; f.mu guards
// them.
type watches map[string]map[*watch]struct{}

// open adds a watch of the named lease to ws.
func (f *FaultStore) open(ws watches, ctx context.Context, name string, yield func(error)) *watch {
	w := &watch{ctx: ctx, name: name, yield: yield, gone: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ws[name] == nil {
		ws[name] = make(map[*watch]struct{})
	}
	ws[name][w] = struct{}{}
	return w
}

// follow ends w, from a goroutine of its own, once inner yields v (with
// errOf(v)) or, yielding nothing, once w's ctx ends; the goroutine returns
// when w ends, whoever ends it.
func follow[T any](f *FaultStore, ws watches, w *watch, inner <-chan T, errOf func(T) error) {
	go func() {
		select {
		case v := <-inner:
			f.endWatch(ws, w, true, errOf(v))
		case <-w.ctx.Done():
			f.endWatch(ws, w, false, nil)
		case <-w.gone:
		}
	}()
}

// endWatch is ws.end under f.mu.
func (f *FaultStore) endWatch(ws watches, w *watch, yield bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws.end(w, yield, err)
}

// end ends w, if it is still open, and yields err if asked to and w's ctx
// has not ended; it reports whether it yielded.
func (ws watches) end(w *watch, yield bool, err error) bool {
	if _, ok := ws[w.name][w]; !ok {
		return false
	}
	delete(ws[w.name], w)
	if len(ws[w.name]) == 0 {
		delete(ws, w.name)
	}
	close(w.gone)
	if !yield || w.ctx.Err() != nil {
		return false
	}
	w.yield(err)
	return true
}

// endAll ends every open watch of the named lease, yielding err, and
// returns how many yielded.
func (ws watches) endAll(name string, err error) int {
	n := 0
	for w := range ws[name] {
		if ws.end(w, true, err) {
			n++
		}
	}
	return n
}

// injectedLoss is the definitive answer of a Lost fault on term g.
func injectedLoss(g leasestore.Grant) error {
	return &leasestore.NotHeldError{Name: g.Name, Token: g.Token, Reason: "leasetest: injected loss"}
}
