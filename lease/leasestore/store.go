package leasestore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Grant is a store's record of one term of a lease: who holds it, the
// fencing token of the term, and the duration the store granted.
type Grant struct {
	// Name is the lease's name, e.g. "singular-controller".
	Name string
	// Holder is the name of the party that holds the lease.
	Holder string
	// Token is a fencing token: it strictly increases every time the lease
	// changes hands (including a re-claim by the same holder name), and it
	// stays the same while one term is extended. Pass it to the resources
	// you guard so they can refuse a deposed holder.
	Token uint64
	// Duration is the term the store actually granted, which may be longer
	// than the one requested (etcd grants whole seconds).
	Duration time.Duration
}

// Store is the back end a Tracker claims and extends leases in.
//
// Its answers fall in three classes, and every Store, this package's
// Tracker and its test kits treat them alike:
//
//   - Definitive: ErrHeld (a *HeldError naming the holder) from Claim, and
//     ErrNotHeld (a *NotHeldError naming the term that is over and, when
//     the store knows, who holds the lease now) from Extend and Revoke. The
//     store did not apply the call, and the answer is the truth.
//   - Not sent: an error matching ErrNotSent. The call never left the
//     store (its ctx ended while the store held it back); nothing changed.
//     Such an error matches nothing that says "unconfirmed".
//   - Ambiguous: every other error (a timeout, a lost connection, a back
//     end without quorum). The store may or may not have applied the call;
//     the caller must not treat it as a loss. ErrUnconfirmed names the
//     class; a store says so with a *CallError.
//
// Success means the lease is held until at least the start of the call
// plus the granted Duration.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Claim takes the named lease for holder for at least d, if nobody
	// holds it. It returns a *HeldError naming the current holder (or the
	// bare ErrHeld if the holder is unknown) when someone else holds it.
	Claim(ctx context.Context, name, holder string, d time.Duration) (Grant, error)
	// Extend renews the term g for at least d. It asserts the same term
	// (g.Token), not only the same holder name, and returns ErrNotHeld when
	// that term is over.
	Extend(ctx context.Context, g Grant, d time.Duration) (Grant, error)
	// Revoke ends the term g early. It returns ErrNotHeld when that term is
	// already over.
	Revoke(ctx context.Context, g Grant) error
}

// LossNotifier is an optional Store extension that tells early when a term
// may be over — its lease revoked, expired, or taken over — instead of at
// the holder's next Extend. MemStore and etcdlease's Store implement it.
// A Tracker then renews at once; the signal is only a hint: only the
// store's answer to that renewal changes what the tracker reports.
type LossNotifier interface {
	// Lost returns a channel that is closed when the store learns that the
	// term g is over (at once if it already is). It must not block: it
	// returns at once and watches in the background, until ctx ends,
	// whereupon the channel stays open and nothing of the watch remains.
	// A nil channel means the store cannot watch g.
	Lost(ctx context.Context, g Grant) <-chan struct{}
}

// ReleaseWatcher is an optional Store extension that tells a waiting
// follower when the term it was refused for is over, so that it claims at
// once instead of at its next poll. MemStore implements it.
//
// A Tracker refused by a *HeldError that names the term (Token non-zero)
// waits on the watch and claims when it yields nil (lease.Timing). The
// signal is only a trigger: the claim still goes to the store, which
// refuses it while any term is live. A watch that yields an error makes
// the tracker poll every ClaimInterval.
type ReleaseWatcher interface {
	// WatchRelease watches the term held names — held.Name's term
	// held.Token, as a refused Claim reported it — and returns a channel
	// that yields one value and is then closed: nil when that term is
	// over (released, revoked, expired, replaced, or the lease's record
	// deleted), at once if it already is, so that a release between the
	// refused claim and the watch is never missed; or an error when the
	// store cannot watch it or the watch broke. It must not block: it
	// returns at once and watches in the background, until ctx ends,
	// whereupon the channel yields nothing and nothing of the watch
	// remains. A store that implements it names the term in every
	// HeldError it returns.
	WatchRelease(ctx context.Context, held *HeldError) <-chan error
}

// The answers of a Store, one sentinel per class (see Store): ErrHeld and
// ErrNotHeld are definitive, ErrNotSent is "nothing was sent",
// ErrUnconfirmed names the ambiguous class, which is every other error.
var (
	// ErrHeld means a claim was denied because another holder has the
	// lease. Do not retry at once: wait for the term to end.
	ErrHeld = errors.New("lease held by another holder")
	// ErrNotHeld means the grant is no longer held: it expired, was
	// revoked, or the lease changed hands. Do not retry the extend; claim
	// afresh if you still want the lease. Stores return a *NotHeldError.
	ErrNotHeld = errors.New("lease not held")
	// ErrNotSent means the store did not send the call at all (its ctx
	// ended while the store was holding calls back): nothing changed, and
	// the tracker keeps what it knew rather than drop to Unknown. Retry
	// later.
	ErrNotSent = errors.New("lease call not sent")
	// ErrUnconfirmed means the store may or may not have applied the call.
	// It is not a loss: keep the old deadline and retry (the Tracker does,
	// answering ErrRenewalFailed meanwhile). The stores of this module
	// return a *CallError matching it; any other error that matches none
	// of ErrHeld, ErrNotHeld and ErrNotSent is ambiguous all the same.
	ErrUnconfirmed = errors.New("lease call not confirmed")
)

// CallError is a store call that got no definitive answer: ambiguous —
// it matches ErrUnconfirmed — or, when Err matches ErrNotSent, not sent,
// and then it matches only ErrNotSent. It names the store, the call and
// the lease, and unwraps to the back end's own error, so errors.Is(err,
// context.DeadlineExceeded) works. It never matches ErrHeld or ErrNotHeld.
type CallError struct {
	Store  string // which store, e.g. "etcdlease" or `k8slease namespace "default"`
	Op     Op     // the call
	Name   string // the lease
	Holder string // empty for a read
	Token  uint64 // the term; 0 for a claim
	Err    error  // what the back end or its client said
}

func (e *CallError) Error() string {
	verb := "unconfirmed"
	if errors.Is(e.Err, ErrNotSent) {
		verb = "not sent"
	}
	msg := fmt.Sprintf("%s: %s lease %q", e.Store, e.Op, e.Name)
	if e.Holder != "" {
		msg += fmt.Sprintf(" for %q", e.Holder)
	}
	if e.Token != 0 {
		msg += fmt.Sprintf(" (token %d)", e.Token)
	}
	return fmt.Sprintf("%s %s: %v", msg, verb, e.Err)
}

// Unwrap returns the cause.
func (e *CallError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnconfirmed and the call was sent.
func (e *CallError) Is(target error) bool {
	return target == ErrUnconfirmed && !errors.Is(e.Err, ErrNotSent)
}

// HeldError is a definitive claim denial that names the current holder.
// It matches ErrHeld with errors.Is.
type HeldError struct {
	Name   string // the lease
	Holder string // who holds it now
	// Token is the holder's term, the start point of a ReleaseWatcher's
	// watch; 0 when the store does not say.
	Token uint64
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease %q held by %q", e.Name, e.Holder)
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// NotHeldError is the definitive answer "term Token of the lease is over"
// to an Extend or a Revoke. It matches ErrNotHeld with errors.Is. Holder
// names who holds the lease now when the store knows (empty when nobody
// does, or the store could not tell), so a tracker that loses its term can
// say at once who leads instead.
type NotHeldError struct {
	Name   string // the lease
	Holder string // who holds it now; empty when nobody does or it is not known
	Token  uint64 // the term that is over
	// Reason says what the store saw, e.g. "expired", "key re-created at
	// revision 812"; it may be empty.
	Reason string
}

func (e *NotHeldError) Error() string {
	msg := fmt.Sprintf("lease %q: term %d is over", e.Name, e.Token)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Holder != "" {
		msg += fmt.Sprintf(" (held by %q now)", e.Holder)
	}
	return msg
}

// Is reports whether target is ErrNotHeld.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }
