// Package leasestore is the contract between a lease.Tracker and the back
// end that keeps its leases: what a store author implements, as
// database/sql/driver is to database/sql. A leader uses package lease and
// never needs this one, unless it keeps its leases in memory (MemStore).
//
// A Store claims, extends and revokes terms (Grant), each with a fencing
// token that strictly increases whenever the lease changes hands. Its
// answers fall in three classes (Class, ClassOf), which the tracker and
// the test kits treat alike: definitive (ErrHeld, ErrNotHeld: the truth),
// not sent (ErrNotSent: nothing changed), and ambiguous (every other
// error, named by ErrUnconfirmed and a *CallError: it may have applied).
// Two optional extensions make hand-overs fast: a LossNotifier says early
// that a held term may be over, a ReleaseWatcher that a term a follower
// waits on is. Counters counts a store's calls in the one shape a Report
// has, so one metrics collector serves every store.
//
// Package lease/leasetest checks a Store against this contract
// (RunStoreContract) and judges histories of many trackers.
package leasestore
