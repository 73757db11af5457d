// Package etcdlease is a leasestore.Store on etcd, for controllers whose leases
// must outlive one process: each lease is one etcd key, attached to an etcd
// lease that etcd itself expires, and its fencing token is the key's create
// revision.
//
// Only etcd's definitive answers become leasestore.ErrHeld (a
// *leasestore.HeldError naming the holder) or leasestore.ErrNotHeld (a
// *leasestore.NotHeldError naming the term that is over and, when the store
// read it, who holds the lease now); a timeout, "no leader", an unavailable
// member, a cancelled context or a broken connection is a
// *leasestore.CallError matching leasestore.ErrUnconfirmed, which wraps
// etcd's own error, so the Tracker reports ErrRenewalFailed, never
// ErrNotLeader. A call never sent (its ctx ended while it waited for one of
// the store's call slots) matches leasestore.ErrNotSent only, and
// ErrOverCapacity when it waited. The README lists the faults both stores
// survive and the assumptions their promises rest on; DESIGN.md holds the
// argument and its words (a term is a lease's term; etcd's is a raft term).
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"}})
//	...
//	defer cli.Close()
//	store, err := etcdlease.NewStore(cli, "/myapp/leases/")
//	...
//	tr, err := lease.NewTracker(lease.Config{
//		Store: store,
//		Name:  "singular", Holder: "unit-0", Duration: 30 * time.Second,
//	})
//
// Store gives each term an etcd lease of its own, and every Extend is a
// keep-alive and a committed read. SessionStore puts every key of a process
// on one etcd lease, its session, and answers Extend without a call to etcd:
// pick it for a controller that leads hundreds or thousands of leases.
//
// Both stores fence writes (Fence), keep an HA group's upgrade steps
// under the holder's token (RecordStep, StepsDone: package upgrade's
// StepLog), are leasestore.LossNotifier,
// ReleaseWatcher and Reporter, bound their calls in flight (WithMaxInFlight)
// and log transitions only (WithLogger). Package etcdtest starts real etcd
// servers in a test binary. This package is its own Go module, so that
// importing the rest of coldstart never pulls in etcd and gRPC.
package etcdlease
