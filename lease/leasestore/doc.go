// Package leasestore is the contract between a lease.Tracker and the back
// end that keeps its leases: what a store author implements, as
// database/sql/driver is to database/sql. A leader uses package lease and
// never needs this one, unless it keeps its leases in memory (MemStore).
//
// A Store claims, extends and revokes terms (Grant), each with a fencing
// token; its answers fall in three classes (see Store). LossNotifier and
// ReleaseWatcher make hand-overs fast; Counters counts a store's calls in
// the one shape of a Report.
//
// Package lease/leasetest checks a Store against this contract
// (RunStoreContract) and judges histories of many trackers.
package leasestore
