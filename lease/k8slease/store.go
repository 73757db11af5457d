package k8slease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Store is a leasestore.Store on coordination.k8s.io/v1 Lease objects in one
// namespace: lease name = object name, Holder = spec.holderIdentity, Token =
// spec.leaseTransitions. It writes the spec the way client-go's
// resourcelock.LeaseLock does (see the package doc for the mapping and
// what a grant promises).
//
// The API server does not expire Leases: the Store remembers, per lease
// name, the last Lease object it read or wrote and when (on its clock) it
// first saw that resourceVersion, so a takeover waits; a new Store only
// starts the wait again. It is safe for concurrent use.
type Store struct {
	leases    coordinationv1client.LeaseInterface
	namespace string
	clk       clock.Clock
	logger    *slog.Logger // nil: no logs
	calls     leasestore.Counters

	mu   sync.Mutex
	seen map[string]sighting // by lease name
	// prefer holds, by lease name, a channel that the next sighting
	// preferring another holder closes (YieldToPreferredHolder).
	prefer map[string]chan struct{}
	// passedUp holds, by lease name, the term this Store claimed once a
	// release reserved for a preferred holder had run out unclaimed, and
	// that holder: YieldToPreferredHolder does not yield that term to it.
	passedUp map[string]passedUp
	// own holds, by lease name, the term this Store last wrote: what it
	// tells its own record from one another party rewrote by.
	own map[string]ownTerm
}

// passedUp is a term claimed past an unclaimed reservation for preferred.
type passedUp struct {
	token     uint64
	preferred string
}

// sighting is the latest version of one Lease object this Store read or
// wrote, and when it first saw that version; gone once the Store found
// that object deleted (lease is then the last version it saw). high is
// the highest leaseTransitions it saw in that object (its UID): a count
// written down behind the Store's back does not lower it.
type sighting struct {
	lease *coordinationv1.Lease // shared: never modified
	since time.Time
	gone  bool
	high  int32
}

var (
	_ leasestore.Store    = (*Store)(nil)
	_ leasestore.Reporter = (*Store)(nil)
)

// NewStore returns a Store on the Lease objects of namespace, which must
// exist. cli is usually kubernetes.Interface's CoordinationV1(); give it a
// rest.Config whose Timeout (if any) is no shorter than the tracker's
// call timeout (Duration/4), so that the tracker's ctx is what cuts a call.
func NewStore(cli coordinationv1client.CoordinationV1Interface, namespace string, opts ...Option) (*Store, error) {
	if c, ok := cli.(*coordinationv1client.CoordinationV1Client); cli == nil || ok && c == nil {
		return nil, jujuerrors.NotValidf("nil client (must be a CoordinationV1Interface, e.g. clientset.CoordinationV1())")
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, jujuerrors.NotValidf("namespace %q (must be a namespace name: %s)", namespace, strings.Join(errs, "; "))
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	o.clock = cmp.Or[clock.Clock](o.clock, clock.WallClock)
	if o.logger != nil {
		o.logger = o.logger.With(slog.String("namespace", namespace))
	}
	return &Store{
		leases:    cli.Leases(namespace),
		namespace: namespace,
		clk:       o.clock,
		logger:    o.logger,
		seen:      make(map[string]sighting),
		prefer:    make(map[string]chan struct{}),
		passedUp:  make(map[string]passedUp),
		own:       make(map[string]ownTerm),
	}, nil
}

// StoreReport implements leasestore.Reporter: each call of Claim, Extend
// and Revoke counted once when it returns (however many API requests it
// made), by class. NotSent stays zero: every call the Store begins is sent.
func (s *Store) StoreReport() leasestore.Report { return s.calls.StoreReport() }

// Claim implements leasestore.Store. It creates the Lease if it does not
// exist, takes it at once if it is released, and takes it from a holder
// (even one of holder's name) only once this Store has seen its record
// unchanged for its leaseDurationSeconds; until then it returns a
// *leasestore.HeldError (Token: its leaseTransitions). The new term's token
// is one more than the highest leaseTransitions this Store has seen in that
// Lease object; the granted Duration is d rounded up to whole seconds. A
// Lease whose leaseTransitions is negative or at its maximum is refused
// with an error naming the Lease, the field and what to do. Any other
// error matches leasestore.ErrUnconfirmed, except an invalid argument
// (NotValid, github.com/juju/errors).
func (s *Store) Claim(ctx context.Context, name, holder string, d time.Duration) (granted leasestore.Grant, err error) {
	done := s.calls.Begin(leasestore.OpClaim)
	defer func() { done(err) }()
	secs, err := checkClaim(name, holder, d)
	if err != nil {
		return leasestore.Grant{}, err
	}
	fail := func(err error) (leasestore.Grant, error) {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName(s.namespace), Op: leasestore.OpClaim, Name: name, Holder: holder, Err: err}
	}
	// A claimable version this Store saw is claimed without a read: a stale
	// one costs a Conflict, then a read (DESIGN.md, "Tokens").
	cur, since, cached := s.claimable(name, holder)
	for reads := 0; ; {
		if !cached {
			reads++
			if cur, since, err = s.read(ctx, name); err != nil {
				return fail(err)
			}
		}
		fromCache := cached
		cached = false
		now := s.clk.Now()
		var (
			out, next, takenFrom *coordinationv1.Lease
			t                    leasestore.Grant
		)
		if cur != nil {
			if t, err = termOf(cur); err != nil {
				return fail(err)
			}
		}
		switch {
		case cur == nil:
			next = s.created(name, holder, secs, now)
			out, err = s.leases.Create(ctx, next, metav1.CreateOptions{})
		case t.Holder != "" && now.Sub(since) < t.Duration:
			return leasestore.Grant{}, heldError(cur, t)
		case t.Holder == "" && reservedFor(cur) != "" && reservedFor(cur) != holder && now.Sub(since) < t.Duration:
			// Released to its preferredHolder, which has the first claim.
			return leasestore.Grant{}, heldError(cur, leasestore.Grant{Holder: reservedFor(cur), Token: t.Token})
		default: // released, or unchanged for its leaseDurationSeconds
			token, terr := s.nextToken(cur)
			if terr != nil {
				return fail(terr)
			}
			if t.Holder != "" {
				takenFrom = cur
			}
			next = takenOver(cur, holder, secs, token, now)
			out, err = s.leases.Update(ctx, next, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			g, gerr := s.claimed(cur, out, tokenOf(next), holder)
			if gerr != nil {
				return fail(gerr)
			}
			if takenFrom != nil {
				s.logTakenOver(g, takenFrom, now.Sub(since))
			}
			return g, nil
		case (fromCache || reads == 1) && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || isGone(err, name)):
			continue // another party wrote (or deleted) it first: judge what it wrote
		}
		return fail(err)
	}
}

// claimed records out, the API server's answer to a claim of cur for
// holder's term token, and returns its grant.
func (s *Store) claimed(cur, out *coordinationv1.Lease, token uint64, holder string) (leasestore.Grant, error) {
	s.saw(out, s.clk.Now())
	g, err := grantOf(out, holder, token)
	if err != nil {
		return leasestore.Grant{}, err
	}
	s.wrote(out)
	if p := reservedFor(cur); p != "" && p != holder {
		s.notePassedUp(out, p)
	}
	return g, nil
}

// Extend implements leasestore.Store: it renews term g (holder and
// leaseTransitions both match) with an update guarded by the
// resourceVersion it last saw, for d rounded up to whole seconds, and moves
// renewTime on (to the next whole second when the last write was in the
// same second, so that client-go sees the change). A term that ran out
// with nobody taking it is extended as well. A term that is over (taken,
// released, its Lease deleted or re-created, or its record rewritten by
// another writer: see update) gets a *leasestore.NotHeldError naming the holder
// now and saying why; any other error matches leasestore.ErrUnconfirmed, except
// an invalid argument (NotValid).
func (s *Store) Extend(ctx context.Context, g leasestore.Grant, d time.Duration) (renewed leasestore.Grant, err error) {
	done := s.calls.Begin(leasestore.OpExtend)
	defer func() { done(err) }()
	secs, err := checkExtend(g, d)
	if err != nil {
		return leasestore.Grant{}, err
	}
	out, err := s.update(ctx, leasestore.OpExtend, g, func(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
		next := cur.DeepCopy()
		at := renewAfter(cur.Spec.RenewTime, now)
		next.Spec.RenewTime = &at
		next.Spec.LeaseDurationSeconds = &secs
		return next
	})
	if err != nil {
		return leasestore.Grant{}, err
	}
	renewed, err = grantOf(out, g.Holder, g.Token)
	if err != nil {
		return leasestore.Grant{}, &leasestore.CallError{Store: storeName(s.namespace), Op: leasestore.OpExtend, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	return renewed, nil
}

// Revoke implements leasestore.Store: it releases term g as client-go does (no
// holder, leaseDurationSeconds 1, leaseTransitions kept), guarded by the
// resourceVersion, so that any party may claim it at once. A term that is
// already over gets a *leasestore.NotHeldError; any other error matches
// leasestore.ErrUnconfirmed, except an invalid argument (NotValid).
func (s *Store) Revoke(ctx context.Context, g leasestore.Grant) (err error) {
	done := s.calls.Begin(leasestore.OpRevoke)
	defer func() { done(err) }()
	if _, err := checkExtend(g, time.Second); err != nil {
		return err
	}
	_, err = s.update(ctx, leasestore.OpRevoke, g, func(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
		next := cur.DeepCopy()
		at := renewAfter(cur.Spec.RenewTime, now)
		none, one := "", int32(1)
		next.Spec.HolderIdentity = &none
		next.Spec.LeaseDurationSeconds = &one
		next.Spec.AcquireTime = &at
		next.Spec.RenewTime = &at
		return next
	})
	return err
}

// update writes change(cur) over the Lease of term g, guarded by cur's
// resourceVersion. It starts from the last version this Store saw, reads
// afresh when that is not term g's, and on a Conflict reads once more and
// retries while the term is still g's (see judge); if it is not, that write
// ended the term, which it logs.
func (s *Store) update(ctx context.Context, op leasestore.Op, g leasestore.Grant, change func(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	fail := func(err error) (*coordinationv1.Lease, error) {
		return nil, &leasestore.CallError{Store: storeName(s.namespace), Op: op, Name: g.Name, Holder: g.Holder, Token: g.Token, Err: err}
	}
	cur := s.last(g.Name)
	// uid is the object term g was seen in: if it was deleted and
	// re-created, leaseTransitions restarted and may repeat g.Token.
	var uid types.UID
	if isTerm(cur, g) {
		uid = cur.UID
	}
	fresh := false
	var tried *coordinationv1.Lease // the version our write conflicted over
	for attempt := 1; ; attempt++ {
		if !fresh && !isTerm(cur, g) {
			var err error
			if cur, _, err = s.read(ctx, g.Name); err != nil {
				return fail(err)
			}
			fresh = true
		}
		if e := s.judge(op, g, uid, cur); e != nil {
			if tried != nil && cur != nil && cur.UID == tried.UID {
				s.logEndedByOther(op, g, e) // (a deletion or re-creation is logged as such)
			}
			return nil, e
		}
		next := change(cur, s.clk.Now())
		out, err := s.leases.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			s.saw(out, s.clk.Now())
			s.wrote(out)
			return out, nil
		case isGone(err, g.Name):
			s.vanished(g.Name)
			return nil, s.over(op, g, nil, "")
		case attempt == 1 && apierrors.IsConflict(err):
			tried, cur, fresh = cur, nil, false // another party wrote: is it still our term?
			continue
		case !apierrors.IsConflict(err):
			s.sent(next) // it may have landed
		}
		return fail(err)
	}
}

// over is the definitive answer to op on term g, which cur (the Lease now,
// nil if there is none) shows is over; why, if not empty, says how.
func (s *Store) over(op leasestore.Op, g leasestore.Grant, cur *coordinationv1.Lease, why string) *leasestore.NotHeldError {
	e := &leasestore.NotHeldError{Name: g.Name, Token: g.Token, Holder: holderOf(cur)}
	_, bad := termOf(cur)
	switch {
	case cur == nil:
		e.Reason = fmt.Sprintf("%s for %q: the Lease object %s/%s does not exist (deleted)", op, g.Holder, s.namespace, g.Name)
	case why != "":
		e.Reason = fmt.Sprintf("%s for %q: %s", op, g.Holder, why)
	case bad != nil:
		e.Reason = fmt.Sprintf("%s for %q: %v", op, g.Holder, bad)
	case e.Holder == "":
		e.Reason = fmt.Sprintf("%s for %q: released (leaseTransitions %d)", op, g.Holder, tokenOf(cur))
	default:
		e.Reason = fmt.Sprintf("%s for %q: the Lease is in term %d", op, g.Holder, tokenOf(cur))
	}
	return e
}

// read gets the Lease name, or nil if it does not exist, and when this
// Store first saw its version.
func (s *Store) read(ctx context.Context, name string) (*coordinationv1.Lease, time.Time, error) {
	cur, err := s.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case isGone(err, name):
		s.vanished(name)
		return nil, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, err
	}
	return cur, s.saw(cur, s.clk.Now()), nil
}

// saw records that the Store read or wrote l, which it had in hand at at,
// and returns when it first saw that version of l. It logs a Lease object
// that replaced the one last seen, unless the Store saw that one deleted.
// (Records are made under the lock, so that they come in order.)
func (s *Store) saw(l *coordinationv1.Lease, at time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.seen[l.Name]
	high := transitionsOf(l)
	switch {
	case !ok:
	case prev.lease.ResourceVersion == l.ResourceVersion && prev.lease.UID == l.UID:
		return prev.since
	case prev.lease.UID == l.UID:
		high = max(high, prev.high)
	case !prev.gone:
		s.logRecreated(prev.lease, l)
	}
	s.seen[l.Name] = sighting{lease: l, since: at, high: high}
	s.notePreferred(l)
	return at
}

// vanished records that the Lease name does not exist, and logs it if the
// Store had seen it and not yet found it gone. The last version seen stays
// (created continues its count).
func (s *Store) vanished(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.seen[name]
	if !ok || prev.gone {
		return
	}
	prev.gone = true
	s.seen[name] = prev
	s.logDeleted(prev.lease)
}

// claimable returns the latest version of the Lease name that the Store
// saw, and since when, if holder could claim it now: released (to nobody
// or to holder), or unchanged for its leaseDurationSeconds. It must not be
// modified.
func (s *Store) claimable(name, holder string) (*coordinationv1.Lease, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg, ok := s.seen[name]
	if !ok || sg.gone {
		return nil, time.Time{}, false
	}
	first := standing(sg.lease)
	if (holderOf(sg.lease) != "" || first != "" && first != holder) && s.clk.Now().Sub(sg.since) < durationOf(sg.lease) {
		return nil, time.Time{}, false
	}
	return sg.lease, sg.since, true
}

// last returns the latest version of the Lease name that the Store saw, or
// nil. It must not be modified.
func (s *Store) last(name string) *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name].lease
}

// created is a new Lease for holder's first term. Its leaseTransitions
// continues from the highest this Store saw in a deleted one of the same
// name, so that its tokens go on increasing; a Lease nobody here saw
// starts at 1.
func (s *Store) created(name, holder string, secs int32, now time.Time) *coordinationv1.Lease {
	transitions := int32(1)
	s.mu.Lock()
	if prev, ok := s.seen[name]; ok && prev.high < math.MaxInt32 {
		transitions = max(transitions, prev.high+1)
	}
	s.mu.Unlock()
	at := renewAfter(nil, now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &at,
			RenewTime:            &at,
			LeaseTransitions:     &transitions,
		},
	}
}

// nextToken is the leaseTransitions of a new term taken over from cur: one
// more than the highest this Store has seen in that Lease object (see
// sighting). A count at its maximum cannot go on.
func (s *Store) nextToken(cur *coordinationv1.Lease) (int32, error) {
	high := transitionsOf(cur)
	s.mu.Lock()
	if sg, ok := s.seen[cur.Name]; ok && sg.lease.UID == cur.UID {
		high = max(high, sg.high)
	}
	s.mu.Unlock()
	if high == math.MaxInt32 {
		return 0, fmt.Errorf("the Lease object %s/%s has counted %d terms (spec.leaseTransitions), the most it can: delete the Lease object to restart its count",
			cur.Namespace, cur.Name, high)
	}
	return high + 1, nil
}

// takenOver is cur given to holder for a new term, token.
func takenOver(cur *coordinationv1.Lease, holder string, secs, token int32, now time.Time) *coordinationv1.Lease {
	next := cur.DeepCopy()
	at := renewAfter(cur.Spec.RenewTime, now)
	next.Spec.HolderIdentity = &holder
	next.Spec.LeaseDurationSeconds = &secs
	next.Spec.AcquireTime = &at
	next.Spec.RenewTime = &at
	next.Spec.LeaseTransitions = &token
	return next
}

// renewAfter is the renewTime of a write at now over a record whose
// renewTime is prev (nil for none): now, to the microsecond the API keeps,
// but at least the whole second after prev's second. client-go compares
// records with renewTime cut to whole seconds, and a write it cannot tell
// from the previous one would not restart its wait.
func renewAfter(prev *metav1.MicroTime, now time.Time) metav1.MicroTime {
	t := now.Round(0).Truncate(time.Microsecond)
	if prev != nil {
		if floor := prev.Truncate(time.Second).Add(time.Second); t.Before(floor) {
			t = floor
		}
	}
	return metav1.NewMicroTime(t)
}

// isGone reports whether err says that the Lease object name does not
// exist: a 404 whose details name it. Any other 404 (no coordination.k8s.io
// API, a proxy in the way) says nothing about the Lease.
func isGone(err error, name string) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	status := st.Status()
	d := status.Details
	return status.Code == http.StatusNotFound && status.Reason == metav1.StatusReasonNotFound &&
		d != nil && d.Name == name && d.Kind == "leases" && d.Group == coordinationv1.GroupName
}

// maxSeconds is the longest term a Lease records (leaseDurationSeconds is
// an int32).
const maxSeconds = math.MaxInt32

// checkClaim validates Claim's arguments and returns d in whole seconds,
// rounded up.
func checkClaim(name, holder string, d time.Duration) (int32, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if err := leasestore.CheckName("holder", holder); err != nil {
		return 0, err
	}
	return seconds(name, d)
}

// checkExtend validates a grant and a duration for Extend or Revoke.
func checkExtend(g leasestore.Grant, d time.Duration) (int32, error) {
	if err := checkName(g.Name); err != nil {
		return 0, err
	}
	if err := leasestore.CheckName("grant's holder", g.Holder); err != nil {
		return 0, err
	}
	if g.Token == 0 || g.Token > math.MaxInt32 {
		return 0, jujuerrors.NotValidf("grant's token %d (must be in [1, %d], as Claim returns)", g.Token, math.MaxInt32)
	}
	return seconds(g.Name, d)
}

// checkName is lease names' rule (leasestore.CheckName) and, within it, a
// Kubernetes object name's.
func checkName(name string) error {
	if err := leasestore.CheckName("lease name", name); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return jujuerrors.NotValidf("lease name %q (must be a Kubernetes object name: %s)", name, strings.Join(errs, "; "))
	}
	return nil
}

// seconds is d rounded up to whole seconds.
func seconds(name string, d time.Duration) (int32, error) {
	if d <= 0 || d > maxSeconds*time.Second {
		return 0, jujuerrors.NotValidf("lease %q duration %v (must be in (0, %v])", name, d, maxSeconds*time.Second)
	}
	return int32((d + time.Second - 1) / time.Second), nil
}
