// Package k8slease is a leasestore.Store on Kubernetes coordination.k8s.io/v1
// Lease objects, for operators: a lease.Tracker on the API server the
// operator already talks to, in place of client-go's leaderelection.
//
// It answers the incident behind package lease, on the engine where it
// happens most: client-go's leaderelection turns a slow or restarting API
// server into "leader election lost", and operators exit and crash-loop on
// it (spin-operator#180, Mellanox/network-operator#3256,
// NVIDIA/gpu-operator#2185, operator-sdk#1813). Here only the API server's
// definitive answers become leasestore.ErrHeld or leasestore.ErrNotHeld; a timeout, a
// 5xx or 429, a refused or broken connection, or a 404 that does not say
// "this Lease does not exist" is a *leasestore.CallError matching
// leasestore.ErrUnconfirmed, so the tracker answers lease.ErrRenewalFailed ("still ours until T") through an
// outage, never lease.ErrNotLeader.
//
//	cfg, err := rest.InClusterConfig()
//	...
//	leaseCfg := rest.CopyConfig(cfg) // a client of its own: see below
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
// # The mapping onto a Lease
//
// A lease is the Lease object of its name in the Store's namespace. The
// Store writes the spec as client-go's resourcelock.LeaseLock does:
// holderIdentity is the Holder, leaseDurationSeconds the granted duration
// (rounded up to whole seconds), acquireTime the start of the term,
// renewTime the last renewal, and leaseTransitions counts terms. The token
// is leaseTransitions, which every claim sets to one more than the highest
// this Store has seen in the Lease object — a re-claim under the same
// holder name included — so tokens strictly increase while the Lease
// object exists, even past a count written down behind the Store's back.
// A negative leaseTransitions, which the API server's validation refuses,
// means the count was lost: the Store takes no term on such a Lease and
// says so (an error naming the Lease, the field and the repair).
//
// Claim creates the Lease (leaseTransitions 1), takes a released one
// (empty holderIdentity) at once, and takes a held one only when its
// record has gone unchanged for its leaseDurationSeconds on this process's
// monotonic clock: the API server does not expire Leases, and the Store
// never compares renewTime with its own wall clock. Extend and
// Revoke update the Lease guarded by its resourceVersion; Revoke releases
// it as client-go does (no holder, leaseDurationSeconds 1).
//
// A held term is ours only while the Lease records it as this Store wrote
// it: holder, token, object (UID), and the acquireTime,
// leaseDurationSeconds and renewTime of its writes. Another party's write
// to those — a second process under the same holder name, kubectl edit, a
// manifest applied over the Lease — ends the term at the next renewal
// (leasestore.ErrNotHeld, saying what changed), never Held on a record
// rewritten behind its back; labels, annotations and spec.preferredHolder
// are anyone's to write.
//
// # Hand-over
//
// The Store is a leasestore.ReleaseWatcher: a claim refused by a live term
// names it (HeldError.Token is its leaseTransitions), and a tracker that
// waits for it watches the Lease object (WatchRelease) instead of claiming
// every ClaimInterval, so it leads within milliseconds of a release, and
// at the end of a crashed holder's leaseDurationSeconds, with no polling
// in between.
//
// # A client of its own
//
// Give the Store a clientset of its own, built from a copy of the
// operator's rest.Config with its own QPS, Burst and no shared
// RateLimiter: client-go throttles each client with one token bucket, and
// an operator's own bursts on a shared one queue the renewals past the
// term (kubernetes-sigs/kueue#15538: leaders crash-looped that way).
//
// # Coordinated leader election
//
// The Store keeps a Lease's spec.strategy and spec.preferredHolder
// (KEP-4355) as written on every update, and YieldToPreferredHolder makes
// a tracker step down — once its Lead functions have returned — when the
// Lease it holds names another preferredHolder. A Lease released so names
// the claimant it is reserved for: the preferred holder's claim succeeds
// at once, any other only once the release has gone unchanged for its
// leaseDurationSeconds.
//
// # What a grant promises, and why an observer agrees
//
// A successful Claim or Extend promises the term until the time the
// tracker sent the call plus the granted duration (less the tracker's
// Margin for clock-rate drift). Any other party — a coldstart tracker or a
// client-go candidate — takes the Lease over only after it has seen the
// record unchanged for leaseDurationSeconds, counted from when it first saw
// that version. It cannot have seen our write before we sent it, so its
// wait ends after our promise does; and its takeover is an update guarded
// by the resourceVersion it watched, so if we renewed meanwhile, the
// takeover fails. client-go notices a change only when the record it reads
// differs, and it reads renewTime to whole seconds, so a renewal in the
// same second as the previous write would look like none and let it take
// over up to a second early: every write therefore moves renewTime to at
// least the next whole second after the previous one.
//
// # What it tells
//
// The Store is a leasestore.Reporter: StoreReport counts its calls of
// Claim, Extend and Revoke once each, by the class of the answer (ok,
// definitive, ambiguous; none is "not sent") and the calls in flight, as
// every store does. WithLogger logs what the store finds about a Lease,
// once each and never per call: a takeover of a Lease whose holder went
// silent, a Lease deleted, a Lease deleted and re-created (its UID
// changed, its leaseTransitions restarted), a renewal or release that
// conflicted with a write that ended the term. The repository's catalogue
// (docs/catalogue.md) lists the records and their keys.
//
// # Limits
//
// Deleting the Lease object (kubectl delete lease) ends the term and
// restarts leaseTransitions: a Store that saw the old object continues its
// count when it re-creates it, but a Lease re-created by another process
// starts again at 1, and resources fenced with the old tokens refuse the
// new ones until they are reset. Against client-go, the guarantee is the
// one two client-go candidates have with each other: a client-go leader
// stops leading when its renewals fail for RenewDeadline, which must stay
// below its LeaseDuration.
//
// This package is its own Go module, so that importing the rest of
// coldstart never pulls in client-go. Its go.mod requires
// github.com/coldstart-go/coldstart at v0.0.0 with a development replace
// directive (=> ../..); a release tags the root module and requires that
// version instead. Its tests against a real kube-apiserver live in the
// nested module internal/apiservertest.
package k8slease
