package etcdlease

import (
	"errors"
	"fmt"

	"github.com/coldstart-go/coldstart/lease"
)

// ErrUnconfirmed marks every error of this package that is not a definitive
// answer and not "not sent": etcd may or may not have applied the call (a
// timeout, "no leader", an unavailable member, a cancelled context, a broken
// connection), or could not confirm it with a quorum (a keep-alive answered
// by a raft leader that may be stale). Do not treat it as a loss of the
// lease: keep the old deadline and retry. Errors matching it are *OpError
// values and unwrap to etcd's own error.
var ErrUnconfirmed = errors.New("etcd did not confirm the lease operation")

// ErrOverCapacity marks a call not sent because every one of the store's
// call slots (WithMaxInFlight) stayed busy until its ctx ended: etcd is
// answering the store's calls more slowly than they come. Either etcd is
// slow or unreachable (then it passes), or the store has more terms than
// etcd can renew in time (then it does not: with Store, every term is a
// keep-alive and a read per renewal; see the README's "Claim storms" for
// the measured limit, and use a SessionStore, whose renewals cost nothing
// per term). Such errors also match lease.ErrNotSent and the ctx's error.
var ErrOverCapacity = errors.New("etcdlease: over capacity")

// OpError is a failure of one store call that is not definitive. It names
// the call and the lease, and unwraps to the cause, so errors.Is(err,
// context.DeadlineExceeded) or errors.Is(err, rpctypes.ErrNoLeader) work.
// It never matches lease.ErrHeld or lease.ErrNotHeld. It matches
// ErrUnconfirmed, unless the call was not sent at all (its cause matches
// lease.ErrNotSent): that is certain, not ambiguous, so it matches only
// lease.ErrNotSent.
type OpError struct {
	Op     string // "claim", "extend", "revoke" or "read"
	Name   string // the lease
	Holder string
	Token  uint64 // 0 for a claim
	Err    error  // what etcd or the client said
}

func (e *OpError) Error() string {
	verb := "unconfirmed"
	if errors.Is(e.Err, lease.ErrNotSent) {
		verb = "not sent"
	}
	if e.Token == 0 {
		return fmt.Sprintf("etcdlease: %s lease %q for %q %s: %v", e.Op, e.Name, e.Holder, verb, e.Err)
	}
	return fmt.Sprintf("etcdlease: %s lease %q for %q (token %d) %s: %v", e.Op, e.Name, e.Holder, e.Token, verb, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnconfirmed and the call was sent.
func (e *OpError) Is(target error) bool {
	return target == ErrUnconfirmed && !errors.Is(e.Err, lease.ErrNotSent)
}

// notSent is the error of a call not sent to etcd at all: its ctx ended
// before one of the store's call slots was free (see WithMaxInFlight), or
// before its batch of claims was sent. It is certain that etcd did not
// apply it, so it matches lease.ErrNotSent (the tracker keeps what it knew)
// and not ErrUnconfirmed; it unwraps to the ctx's error.
func notSent(op, name, holder string, token uint64, err error) error {
	return &OpError{Op: op, Name: name, Holder: holder, Token: token, Err: fmt.Errorf("%w: %w", lease.ErrNotSent, err)}
}

// notHeld is the definitive loss of the term g, as the store read its key
// (kv; nil when the key is gone): a *lease.NotHeldError naming who holds
// the lease now when the key belongs to another term.
func notHeld(op string, g lease.Grant, kv *keyValue) error {
	if kv == nil || uint64(kv.CreateRevision) == g.Token {
		return termEnded(op, g, "", "key gone")
	}
	return termEnded(op, g, string(kv.Value), fmt.Sprintf("key created again at revision %d", kv.CreateRevision))
}

// termOver is the definitive loss of the term g for the reason why; holder
// is who holds the lease now, when the store knows.
func termEnded(op string, g lease.Grant, holder, why string) error {
	return &lease.NotHeldError{Name: g.Name, Holder: holder, Token: g.Token, Reason: op + ": " + why}
}
