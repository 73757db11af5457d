package etcdlease

import (
	"errors"
	"fmt"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// storeName names this package's stores in their *leasestore.CallError values.
const storeName = "etcdlease"

// The errors of this package; the rest are lease's (the package doc and the
// README, "Errors").
var (
	// ErrOverCapacity marks a call not sent because the store is over
	// capacity: every one of its call slots (WithMaxInFlight) stayed busy
	// until the call's ctx ended, or — a Store's claim — the terms it
	// holds already need all its slots for their renewals, or its
	// keep-alives ran late for want of slots. Either etcd is slow or
	// unreachable (then it passes), or a Store has more terms than etcd
	// can renew in time: use a SessionStore, whose renewals cost nothing
	// per term (see the README, "Which store"). Such errors also match
	// leasestore.ErrNotSent (and the ctx's error when it ended). A Store's
	// Extend of a term whose etcd lease ran out while its keep-alives
	// waited for slots returns leasestore.ErrNotHeld, as it is, matching
	// ErrOverCapacity too.
	ErrOverCapacity = errors.New("etcdlease: over capacity")
)

// notSent is the error of a call not sent to etcd at all: its ctx ended
// before one of the store's call slots was free (see WithMaxInFlight), or
// before its batch of claims was sent. It is certain that etcd did not
// apply it, so it matches leasestore.ErrNotSent (the tracker keeps what it knew)
// and not ErrUnconfirmed; it unwraps to the ctx's error.
func notSent(op leasestore.Op, name, holder string, token uint64, err error) error {
	return &leasestore.CallError{Store: storeName, Op: op, Name: name, Holder: holder, Token: token, Err: fmt.Errorf("%w: %w", leasestore.ErrNotSent, err)}
}

// termEnded is the definitive loss of the term g for the reason why; holder
// is who holds the lease now, when the store knows.
func termEnded(op leasestore.Op, g leasestore.Grant, holder, why string) error {
	return &leasestore.NotHeldError{Name: g.Name, Holder: holder, Token: g.Token, Reason: op.String() + ": " + why}
}
