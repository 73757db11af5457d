package gate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coldstart-go/coldstart/internal/printable"
)

// Waiter is what a worker waits on. It has the method set of juju's
// worker/gate.Waiter, so juju code accepts these gates unchanged.
type Waiter interface {
	// Unlocked returns a channel that is closed once the gate unlocks.
	// It is never closed for a gate that fails.
	Unlocked() <-chan struct{}
	// IsUnlocked reports whether the gate has unlocked.
	IsUnlocked() bool
}

// Unlocker is what the worker that finishes a task holds. It has the method
// set of juju's worker/gate.Unlocker.
type Unlocker interface {
	Unlock()
}

// failer is implemented by waiters that can fail (a *Lock). Wait uses it to
// release its caller with the failure instead of waiting forever.
type failer interface {
	Done() <-chan struct{}
	Err() error
}

const (
	stateLocked uint32 = iota
	stateUnlocked
	stateFailed
)

// Lock is a one-shot named gate. It starts locked; Unlock opens it for good
// and Fail marks it as never going to open. Whichever of the two is called
// first wins; later calls of either are no-ops.
//
// The zero Lock is a locked gate with no name, ready to use; New names it.
// A Lock must not be copied after first use. It is safe for concurrent use.
type Lock struct {
	name     string
	state    atomic.Uint32 // stateLocked until resolved; written once, under mu
	lazy     sync.Once     // makes the channels of a zero Lock
	unlocked chan struct{} // closed on Unlock
	done     chan struct{} // closed on Unlock or Fail

	mu    sync.Mutex
	err   *FailedError // set before done is closed, never changed after
	seq   uint64       // resolution's place in resolveSeq; 0 while locked
	hooks []func()     // run once on resolution; nil after
	after []*Lock      // what it waits for, for a Board's timeline (After, AllOf, AnyOf)
}

// resolveSeq orders the resolutions of all gates in the process; a Board
// sorts by it (DESIGN.md, "Order of resolution").
var resolveSeq atomic.Uint64

// New returns a locked gate. The name says what the gate waits for
// ("api-port-open", "upgrade-steps-done"); it appears in errors and reports.
func New(name string) *Lock {
	return &Lock{
		name:     name,
		unlocked: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Name returns the name the gate was made with.
func (l *Lock) Name() string { return l.name }

// Unlock opens the gate and releases every waiter. It is idempotent, and a
// no-op on a gate that has failed.
func (l *Lock) Unlock() { l.resolve(nil) }

// Fail marks the gate as one that will never unlock and releases every
// waiter with an error matching err. It is a no-op on a gate that has
// already unlocked or failed. Fail(nil) fails the gate with the cause
// "no cause given", so a failed gate always has a non-nil Err (matching
// ErrFailed, as every failed gate's does).
func (l *Lock) Fail(err error) {
	if err == nil {
		err = errNoCause
	}
	l.resolve(&FailedError{Name: l.name, Err: err})
}

// chans makes the channels of a zero Lock; the Once is one atomic load on
// every later call.
func (l *Lock) chans() {
	l.lazy.Do(func() {
		if l.done == nil {
			l.unlocked, l.done = make(chan struct{}), make(chan struct{})
		}
	})
}

func (l *Lock) resolve(failure *FailedError) {
	l.chans()
	l.mu.Lock()
	if l.state.Load() != stateLocked {
		l.mu.Unlock()
		return
	}
	l.seq = resolveSeq.Add(1)
	if failure != nil {
		l.err = failure
		l.state.Store(stateFailed)
	} else {
		l.state.Store(stateUnlocked)
		close(l.unlocked)
	}
	close(l.done)
	hooks := l.hooks
	l.hooks = nil
	l.mu.Unlock()
	// Hooks run on the resolving goroutine, after the state is visible, so
	// anything ordered after Unlock returns sees their effects.
	for _, h := range hooks {
		h()
	}
}

// resolvedSeq returns the gate's place in the order of resolutions, or 0
// while it is locked.
func (l *Lock) resolvedSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// After records that l opens or fails only after inputs have, as
// systemd's After= orders units, for a Board's Timeline to build critical
// chains (AllOf and AnyOf record their parts themselves). It changes
// nothing else, returns l, and panics on a nil input:
//
//	api := gate.New("api-port").After(stable)
func (l *Lock) After(inputs ...*Lock) *Lock {
	for i, in := range inputs {
		if in == nil {
			panic(fmt.Sprintf("gate.Lock(%q).After: input %d is nil", l.name, i))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.after = append(l.after, inputs...)
	return l
}

// inputs returns what l was recorded to wait for.
func (l *Lock) inputs() []*Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clip(l.after)
}

// onResolve arranges for f to run once the gate unlocks or fails: at once if
// it already has, else on the goroutine that resolves it.
func (l *Lock) onResolve(f func()) {
	l.mu.Lock()
	if l.state.Load() == stateLocked {
		l.hooks = append(l.hooks, f)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	f()
}

// Unlocked returns a channel that is closed once the gate unlocks. It is
// never closed if the gate fails; use Done or Wait to learn of failure.
func (l *Lock) Unlocked() <-chan struct{} {
	l.chans()
	return l.unlocked
}

// Done returns a channel that is closed once the gate unlocks or fails.
func (l *Lock) Done() <-chan struct{} {
	l.chans()
	return l.done
}

// IsUnlocked reports whether the gate has unlocked.
func (l *Lock) IsUnlocked() bool { return l.state.Load() == stateUnlocked }

// Err returns nil unless the gate failed, and then an error that names the
// gate and matches the cause given to Fail (errors.Is).
func (l *Lock) Err() error {
	if l.state.Load() != stateFailed {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// String returns the gate's name and state on one line, for logs; its
// name and cause are printed as Report.String prints them.
func (l *Lock) String() string {
	name := printable.Name(l.name)
	switch l.state.Load() {
	case stateUnlocked:
		return name + " (unlocked)"
	case stateFailed:
		return name + " (failed: " + causeText(l.Err()) + ")"
	}
	return name + " (locked)"
}

// Wait blocks until w unlocks, returning nil; until ctx ends, returning
// ctx.Err(); or, if w can fail (a *Lock, or anything with the same Done and
// Err methods), until it fails, returning an error that matches the cause
// with errors.Is. A gate that is already unlocked wins over an ended ctx.
func Wait(ctx context.Context, w Waiter) error {
	if w.IsUnlocked() {
		return nil
	}
	// A ctx that never ends gets a plain receive (DESIGN.md, "Wait").
	done := ctx.Done()
	f, canFail := w.(failer)
	switch {
	case canFail && done == nil:
		<-f.Done()
	case canFail:
		select {
		case <-f.Done():
		case <-done:
			return ctx.Err()
		}
	case done == nil:
		<-w.Unlocked()
		return nil
	default:
		select {
		case <-w.Unlocked():
			return nil
		case <-done:
			return ctx.Err()
		}
	}
	return outcome(w, f)
}

// outcome is the result of a resolved failer: nil if it unlocked, else its
// error — ErrFailed for a foreign failer that closed Done without one.
func outcome(w Waiter, f failer) error {
	if w.IsUnlocked() {
		return nil
	}
	if err := f.Err(); err != nil {
		return err
	}
	return ErrFailed
}

// alreadyUnlocked is the one closed channel every AlreadyUnlocked shares.
var alreadyUnlocked = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

type openWaiter struct{}

func (openWaiter) Unlocked() <-chan struct{} { return alreadyUnlocked }
func (openWaiter) IsUnlocked() bool          { return true }

// AlreadyUnlocked is a Waiter that is always open. Every use shares one
// closed channel, so it costs nothing.
var AlreadyUnlocked Waiter = openWaiter{}
