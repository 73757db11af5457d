package leasestore

import (
	"errors"
	"strconv"
	"sync/atomic"
)

// Report counts lease store calls in one shape — the finished calls
// of each operation by the class of their answer, and the calls in flight
// — whoever makes or serves them: a Store's Report counts the calls it
// served, a Tracker's Report.Calls the calls it made. Both count with
// Counters, so one reader serves them all.
type Report struct {
	Claim, Extend, Revoke Calls
	// InFlight is the calls begun and not yet returned, including calls a
	// store holds back while it bounds its calls in flight.
	InFlight int
}

// Calls counts the finished calls of one operation by the class of
// their answer (see Store).
type Calls struct {
	// OK counts the calls that succeeded.
	OK uint64
	// Definitive counts the definitive refusals: ErrHeld from Claim,
	// ErrNotHeld from Extend and Revoke.
	Definitive uint64
	// NotSent counts the calls that never left the store (ErrNotSent).
	NotSent uint64
	// Ambiguous counts every other error: the store may have applied the
	// call.
	Ambiguous uint64
}

// Reporter is a Store that counts its calls: what a metrics collector
// asks of any store. MemStore, leasetest.FaultStore and the etcdlease and
// k8slease stores implement it.
type Reporter interface {
	StoreReport() Report
}

// Op is a store call's operation: the three of Store, each a row of a
// Report, and the reads and watches a store makes of its own, which a
// CallError may name but Counters do not count.
type Op int

// The operations of a store.
const (
	OpClaim Op = iota
	OpExtend
	OpRevoke
	OpRead         // a read of the lease's record, e.g. a Holder
	OpWatchRelease // a ReleaseWatcher's watch

	counted = OpRevoke + 1 // the operations Counters count
)

func (op Op) String() string {
	switch op {
	case OpClaim:
		return "claim"
	case OpExtend:
		return "extend"
	case OpRevoke:
		return "revoke"
	case OpRead:
		return "read"
	case OpWatchRelease:
		return "watch release"
	}
	return "Op(" + strconv.Itoa(int(op)) + ")"
}

// Counters counts store calls for a Report, classifying each
// answer as Store says, so that every store (and the Tracker) counts the
// same way. A store holds one and brackets each call:
//
//	func (s *MyStore) Claim(ctx context.Context, name, holder string, d time.Duration) (leasestore.Grant, error) {
//		done := s.calls.Begin(leasestore.OpClaim)
//		g, err := s.claim(ctx, name, holder, d)
//		done(err)
//		return g, err
//	}
//
//	func (s *MyStore) StoreReport() leasestore.Report { return s.calls.StoreReport() }
//
// The zero value is ready to use; it is safe for concurrent use, lock-free,
// and allocates nothing while done stays in the calling function.
type Counters struct {
	begun atomic.Uint64             // in flight: begun less finished
	ops   [counted][4]atomic.Uint64 // finished calls by Op and outcome
}

// Begin counts a call of op in flight and returns the function that ends
// it, to be called once with the call's error. An op that is not one of
// OpClaim, OpExtend and OpRevoke panics.
func (c *Counters) Begin(op Op) (done func(err error) Class) {
	row := &c.ops[op]
	c.begun.Add(1)
	return func(err error) Class {
		class := ClassOf(err)
		row[class].Add(1)
		return class
	}
}

// StoreReport returns the counts now. Each count is read atomically; a
// call that ends meanwhile may show in one count and not yet in another.
func (c *Counters) StoreReport() Report {
	// Finished before begun, so that InFlight is never negative.
	r := Report{Claim: c.load(OpClaim), Extend: c.load(OpExtend), Revoke: c.load(OpRevoke)}
	r.InFlight = int(c.begun.Load() - r.Claim.total() - r.Extend.total() - r.Revoke.total())
	return r
}

func (c *Counters) load(op Op) Calls {
	row := &c.ops[op]
	return Calls{OK: row[ClassOK].Load(), Definitive: row[ClassDefinitive].Load(),
		NotSent: row[ClassNotSent].Load(), Ambiguous: row[ClassAmbiguous].Load()}
}

func (c Calls) total() uint64 { return c.OK + c.Definitive + c.NotSent + c.Ambiguous }

// Class is the class of a store call's answer (see Store).
type Class int

// The classes of a store call's answer.
const (
	ClassOK         Class = iota // success
	ClassDefinitive              // ErrHeld or ErrNotHeld: the store did not apply the call
	ClassNotSent                 // ErrNotSent: the call never left the store
	ClassAmbiguous               // every other error: the store may have applied the call
)

func (c Class) String() string {
	switch c {
	case ClassOK:
		return "ok"
	case ClassDefinitive:
		return "definitive"
	case ClassNotSent:
		return "not sent"
	case ClassAmbiguous:
		return "ambiguous"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// ClassOf returns the class of err, a store call's answer.
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassOK
	case errors.Is(err, ErrHeld) || errors.Is(err, ErrNotHeld):
		return ClassDefinitive
	case errors.Is(err, ErrNotSent):
		return ClassNotSent
	}
	return ClassAmbiguous
}
