package lease

import (
	"errors"
	"sync/atomic"
)

// StoreReport is a point-in-time picture of a Store's calls, for people,
// logs, status pages and metrics: the finished calls of each operation by
// outcome, and the calls in flight. Every store that has one counts alike
// (with StoreCounters), so one collector serves them all.
type StoreReport struct {
	Claim, Extend, Revoke StoreCalls
	// InFlight is the calls begun and not yet returned, including calls a
	// store holds back while it bounds its calls in flight.
	InFlight int
}

// StoreCalls counts the finished calls of one operation by the class of
// their answer (see Store).
type StoreCalls struct {
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

// StoreReporter is a Store that counts its calls: what a metrics collector
// asks of any store. MemStore and leasetest.FaultStore implement it.
type StoreReporter interface {
	StoreReport() StoreReport
}

// StoreCounters counts a Store's calls for its StoreReport, classifying
// each answer as Store says, so that every store counts the same way. A
// store holds one and brackets each call:
//
//	func (s *MyStore) Claim(ctx context.Context, name, holder string, d time.Duration) (lease.Grant, error) {
//		done := s.calls.BeginClaim()
//		g, err := s.claim(ctx, name, holder, d)
//		done(err)
//		return g, err
//	}
//
//	func (s *MyStore) StoreReport() lease.StoreReport { return s.calls.StoreReport() }
//
// Each Begin method counts a call in flight and returns the function that
// ends it, to be called once with the call's error. The zero value is
// ready to use; it is safe for concurrent use and lock-free (an atomic add
// at each end of a call), and allocates nothing while done stays in the
// calling function, as above.
type StoreCounters struct {
	// begun counts the calls begun; the calls in flight are those begun
	// less those finished (counted by outcome): one atomic add at each end
	// of a call.
	begun                 atomic.Uint64
	claim, extend, revoke callCounters
}

type callCounters struct{ ok, definitive, notSent, ambiguous atomic.Uint64 }

// BeginClaim begins a Claim.
func (c *StoreCounters) BeginClaim() (done func(err error)) { return c.begin(&c.claim) }

// BeginExtend begins an Extend.
func (c *StoreCounters) BeginExtend() (done func(err error)) { return c.begin(&c.extend) }

// BeginRevoke begins a Revoke.
func (c *StoreCounters) BeginRevoke() (done func(err error)) { return c.begin(&c.revoke) }

func (c *StoreCounters) begin(op *callCounters) func(error) {
	c.begun.Add(1)
	return func(err error) {
		switch classify(err) {
		case outcomeOK:
			op.ok.Add(1)
		case outcomeDefinitive:
			op.definitive.Add(1)
		case outcomeNotSent:
			op.notSent.Add(1)
		default:
			op.ambiguous.Add(1)
		}
	}
}

// StoreReport returns the counts now. Each count is read atomically; a
// call that ends meanwhile may show in one count and not yet in another.
func (c *StoreCounters) StoreReport() StoreReport {
	// The finished calls are read before the begun ones: every call
	// counted finished was counted begun before, so InFlight is never
	// negative.
	r := StoreReport{Claim: c.claim.load(), Extend: c.extend.load(), Revoke: c.revoke.load()}
	r.InFlight = int(c.begun.Load() - r.Claim.total() - r.Extend.total() - r.Revoke.total())
	return r
}

func (c *callCounters) load() StoreCalls {
	return StoreCalls{OK: c.ok.Load(), Definitive: c.definitive.Load(),
		NotSent: c.notSent.Load(), Ambiguous: c.ambiguous.Load()}
}

func (c StoreCalls) total() uint64 { return c.OK + c.Definitive + c.NotSent + c.Ambiguous }

// outcome is the class of a store call's answer (see Store).
type outcome int

const (
	outcomeOK outcome = iota
	outcomeDefinitive
	outcomeNotSent
	outcomeAmbiguous
)

// classify returns the class of err, a store call's answer.
func classify(err error) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, ErrHeld) || errors.Is(err, ErrNotHeld):
		return outcomeDefinitive
	case errors.Is(err, ErrNotSent):
		return outcomeNotSent
	}
	return outcomeAmbiguous
}
