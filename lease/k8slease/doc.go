// Package k8slease is a leasestore.Store on Kubernetes coordination.k8s.io/v1
// Lease objects, for operators: a lease.Tracker on the API server the
// operator already talks to, in place of, or beside, client-go's
// leaderelection on the same Lease.
//
// Only the API server's definitive answers become leasestore.ErrHeld or
// leasestore.ErrNotHeld; a timeout, a 5xx or 429, a refused or broken
// connection, or a 404 that does not say "this Lease does not exist" is a
// *leasestore.CallError matching leasestore.ErrUnconfirmed, so the tracker
// answers lease.ErrRenewalFailed through an outage, never lease.ErrNotLeader.
//
//	cfg, err := rest.InClusterConfig()
//	...
//	leaseCfg := rest.CopyConfig(cfg) // a client of its own (kubernetes-sigs/kueue#15538)
//	leaseCfg.QPS, leaseCfg.Burst, leaseCfg.RateLimiter = 5, 10, nil
//	cs, err := kubernetes.NewForConfig(leaseCfg)
//	...
//	store, err := k8slease.NewStore(cs.CoordinationV1(), "my-operator-system")
//	...
//	tr, err := lease.NewTracker(lease.Config{
//		Store: store, Name: "my-operator-leader", Holder: podName,
//		Duration: 15 * time.Second,
//	})
//
// The Store writes the spec as client-go's resourcelock.LeaseLock does; the
// token is leaseTransitions. It is a leasestore.ReleaseWatcher and a
// leasestore.Reporter, and keeps KEP-4355's spec.strategy and
// spec.preferredHolder (YieldToPreferredHolder). README.md maps each call
// onto the Lease, lists what another writer's change does and the limits;
// DESIGN.md holds the arguments. This package is its own Go module, so that
// importing the rest of coldstart never pulls in client-go.
package k8slease
