package k8slease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	fakecoordination "k8s.io/client-go/kubernetes/typed/coordination/v1/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// unvalidated is a client of an API server that stores any Lease it is
// given: no validation, so a Lease written past the real server's (into
// etcd, by a restored backup, by a server that does not validate) can be
// set up. Updates are guarded by resourceVersion as the real server's are
// (a stale one is a Conflict); it serves objs.
func unvalidated(t *testing.T, objs ...*coordinationv1.Lease) coordinationv1client.CoordinationV1Interface {
	_, cli := newLeaseServer(t, objs...)
	return cli
}

// newLeaseServer is unvalidated's server and its client.
func newLeaseServer(t *testing.T, objs ...*coordinationv1.Lease) (*leaseServer, coordinationv1client.CoordinationV1Interface) {
	t.Helper()
	srv := &leaseServer{leases: make(map[string]*coordinationv1.Lease)}
	for _, l := range objs {
		srv.put(l.DeepCopy())
	}
	f := &k8stesting.Fake{}
	f.AddReactor("*", "leases", srv.react)
	return srv, &fakecoordination.FakeCoordinationV1{Fake: f}
}

// leaseServer holds the Leases of unvalidated's server.
type leaseServer struct {
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease // by name
	rv     int
	// unanswered is how many of the next updates are applied and then
	// answered with a timeout, as a write whose answer was lost.
	unanswered int
}

// get returns the Lease name as stored (nil if none).
func (s *leaseServer) get(name string) *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[name].DeepCopy()
}

// loseAnswers makes the next n updates land without an answer.
func (s *leaseServer) loseAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unanswered = n
}

// put stores l as a new version (l is the server's: not shared).
func (s *leaseServer) put(l *coordinationv1.Lease) {
	s.rv++
	l.ResourceVersion = strconv.Itoa(s.rv)
	if l.UID == "" {
		l.UID = types.UID(fmt.Sprintf("uid-%d", s.rv))
	}
	s.leases[l.Name] = l
}

func (s *leaseServer) react(a k8stesting.Action) (bool, runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	leases := coordinationv1.Resource("leases")
	// (Switched on the verb: CreateAction and UpdateAction are one
	// interface.)
	switch a.GetVerb() {
	case "get":
		name := a.(k8stesting.GetAction).GetName()
		cur, ok := s.leases[name]
		if !ok {
			return true, nil, apierrors.NewNotFound(leases, name)
		}
		return true, cur.DeepCopy(), nil
	case "create":
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		if _, ok := s.leases[l.Name]; ok {
			return true, nil, apierrors.NewAlreadyExists(leases, l.Name)
		}
		l.UID = ""
		s.put(l)
		return true, l.DeepCopy(), nil
	case "update":
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, ok := s.leases[l.Name]
		switch {
		case !ok:
			return true, nil, apierrors.NewNotFound(leases, l.Name)
		case l.ResourceVersion != cur.ResourceVersion || l.UID != "" && l.UID != cur.UID:
			return true, nil, apierrors.NewConflict(leases, l.Name, errors.New("the object has been modified"))
		}
		l.UID = cur.UID
		s.put(l)
		if s.unanswered > 0 {
			s.unanswered--
			return true, nil, apierrors.NewTimeoutError("the answer was lost", 1)
		}
		return true, l.DeepCopy(), nil
	case "delete":
		name := a.(k8stesting.DeleteAction).GetName()
		if _, ok := s.leases[name]; !ok {
			return true, nil, apierrors.NewNotFound(leases, name)
		}
		delete(s.leases, name)
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("unvalidated: %s not served", a.GetVerb())
}

// heldLease is a Lease of ns held by holder, renewed at renew.
func heldLease(holder string, transitions, secs int32, renew time.Time) *coordinationv1.Lease {
	at := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "leader", Namespace: "ns", UID: "uid-1"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder, LeaseTransitions: &transitions, LeaseDurationSeconds: &secs,
			AcquireTime: &at, RenewTime: &at,
		},
	}
}

// TestImpossibleLeaseTransitionsIsRefused (issue 31, defect 3): a Lease
// whose leaseTransitions is negative — which the API server's validation
// refuses, so it was written past it — has lost its count of terms: no
// token derived from it is known to exceed those handed out on it. Its
// claim is refused with an error naming the Lease, the field, the value and
// the repair, before and after its holder's term ran out; before, it was
// taken over with token 0 or 2^64−4, which the store's own Extend then
// refused (NotValid: the tracker Unknown for ever).
func TestImpossibleLeaseTransitionsIsRefused(t *testing.T) {
	for _, v := range []int32{-1, -5, math.MinInt32} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			clk := testclock.NewClock(time.Now())
			s, err := k8slease.NewStore(unvalidated(t, heldLease("old", v, 1, clk.Now())), "ns", k8slease.WithClock(clk))
			require.NoError(t, err)
			ctx := context.Background()
			_, err = s.Claim(ctx, "leader", "a", 2*time.Second) // its first sight of the record
			require.Error(t, err, "Claim while its record is live")
			clk.Advance(time.Second) // the record unchanged for its leaseDurationSeconds
			for _, when := range []string{"once its record went unchanged for leaseDurationSeconds", "again"} {
				g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
				if err == nil {
					_, xerr := s.Extend(ctx, g, 2*time.Second)
					t.Fatalf("Claim %s took the Lease at token %d; the store's Extend of that grant: %v", when, g.Token, xerr)
				}
				require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "Claim %s", when)
				require.False(t, errors.Is(err, leasestore.ErrHeld), "Claim %s: %v", when, err)
				for _, want := range []string{"ns/leader", "spec.leaseTransitions " + fmt.Sprint(v), "delete the Lease object"} {
					require.ErrorContains(t, err, want, "Claim %s", when)
				}
			}
			// Refused at once, too: the store cannot name the live term
			// (its token), so it does not say "held" either.
			live, err := k8slease.NewStore(unvalidated(t, heldLease("old", v, 1, clk.Now())), "ns", k8slease.WithClock(clk))
			require.NoError(t, err)
			_, err = live.Claim(ctx, "leader", "a", 2*time.Second)
			require.ErrorContains(t, err, "spec.leaseTransitions "+fmt.Sprint(v), "Claim while its record is live")
			require.False(t, errors.Is(err, leasestore.ErrHeld), "Claim while its record is live: %v", err)
		})
	}
}

// TestTrackerOnImpossibleLeaseTransitionsIsNeverHeld: a tracker on such a
// Lease never says Held, and says why.
func TestTrackerOnImpossibleLeaseTransitionsIsNeverHeld(t *testing.T) {
	clk := testclock.NewClock(time.Now())
	s, err := k8slease.NewStore(unvalidated(t, heldLease("old", -1, 1, clk.Now().Add(-time.Minute))), "ns", k8slease.WithClock(clk))
	require.NoError(t, err)
	tr, err := lease.NewTracker(lease.Config{Store: s, Name: "leader", Holder: "a", Duration: time.Second, Clock: clk})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for end := clk.Now().Add(5 * time.Second); clk.Now().Before(end); {
		r, err := leasetest.Step(ctx, tr, clk)
		require.NoError(t, err)
		require.NotEqual(t, lease.Held, r.State, "the tracker holds a term on a Lease with leaseTransitions -1 (token %d)", r.Token)
	}
	_, err = tr.Check(ctx, 0)
	require.ErrorContains(t, err, "spec.leaseTransitions -1")
}

// TestTakeoverTokenExceedsEveryTokenSeen: a leaseTransitions written down
// behind the store's back (a manifest applied over the Lease, say) does not
// make the store hand out a token at or below one it handed out or saw on
// that Lease object.
func TestTakeoverTokenExceedsEveryTokenSeen(t *testing.T) {
	clk := testclock.NewClock(time.Now())
	cli := unvalidated(t, heldLease("old", 7, 1, clk.Now()))
	s, err := k8slease.NewStore(cli, "ns", k8slease.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.Claim(ctx, "leader", "a", time.Second)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	clk.Advance(time.Second)
	g, err := s.Claim(ctx, "leader", "a", time.Second)
	require.NoError(t, err)
	require.Equal(t, uint64(8), g.Token)

	// The count is written down to 2, the holder cleared.
	l, err := cli.Leases("ns").Get(ctx, "leader", metav1.GetOptions{})
	require.NoError(t, err)
	two, none := int32(2), ""
	l.Spec.LeaseTransitions, l.Spec.HolderIdentity = &two, &none
	_, err = cli.Leases("ns").Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)

	_, err = s.Extend(ctx, g, time.Second)
	require.ErrorIs(t, err, leasestore.ErrNotHeld)
	next, err := s.Claim(ctx, "leader", "b", time.Second)
	require.NoError(t, err)
	require.Greater(t, next.Token, g.Token, "a takeover after the count was written down from 8 to 2")
	_, err = s.Extend(ctx, next, time.Second)
	require.NoError(t, err)
}

// TestLandedRenewalWithoutAnswerIsStillOurs: a renewal that landed but got
// no answer (a timeout) left a renewTime this store wrote without knowing
// it had; the next renewal conflicts with it, reads it, and knows it for
// its own: the term goes on, with the same token. (A record whose
// renewTime the store did not write ends the term: see
// internal/apiservertest's intruder tests.)
func TestLandedRenewalWithoutAnswerIsStillOurs(t *testing.T) {
	clk := testclock.NewClock(time.Now())
	srv, cli := newLeaseServer(t)
	s, err := k8slease.NewStore(cli, "ns", k8slease.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	g, err := s.Claim(ctx, "leader", "a", 2*time.Second)
	require.NoError(t, err)
	for _, lost := range []int{1, 3} {
		srv.loseAnswers(lost)
		for range lost {
			clk.Advance(300 * time.Millisecond)
			_, err = s.Extend(ctx, g, 2*time.Second)
			require.ErrorIs(t, err, leasestore.ErrUnconfirmed, "a renewal whose answer was lost")
		}
		clk.Advance(300 * time.Millisecond)
		g2, err := s.Extend(ctx, g, 2*time.Second)
		require.NoError(t, err, "the renewal after %d that landed unanswered", lost)
		require.Equal(t, g.Token, g2.Token)
	}

	// Another writer's renewTime, by contrast, ends it.
	l, err := cli.Leases("ns").Get(ctx, "leader", metav1.GetOptions{})
	require.NoError(t, err)
	at := metav1.NewMicroTime(l.Spec.RenewTime.Add(time.Hour))
	l.Spec.RenewTime = &at
	_, err = cli.Leases("ns").Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = s.Extend(ctx, g, 2*time.Second)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh)
	require.Contains(t, nh.Reason, "rewritten by another writer: renewTime")
}
