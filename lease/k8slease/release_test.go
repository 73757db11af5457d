package k8slease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	fakecoordination "k8s.io/client-go/kubernetes/typed/coordination/v1/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// fakeServer is an API server the release watch tests script: GET answers
// the Lease it is given, and each watch request gets a watcher the test
// drives. (The real server's 410 Gone and its crash timing are hard to
// provoke on demand; internal/apiservertest tests the rest on a real one.)
type fakeServer struct {
	mu      sync.Mutex
	current *coordinationv1.Lease
	gets    int
	watches chan watchRequest // one per watch request
}

type watchRequest struct {
	rv string // the resourceVersion it starts from
	w  *watch.FakeWatcher
}

func newFakeServer(t *testing.T, l *coordinationv1.Lease) (*fakeServer, *fakecoordination.FakeCoordinationV1) {
	s := &fakeServer{current: l, watches: make(chan watchRequest, 16)}
	f := &k8stesting.Fake{}
	f.AddReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.gets++
		return true, s.current.DeepCopy(), nil
	})
	f.AddWatchReactor("leases", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(4, false)
		s.watches <- watchRequest{a.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion, w}
		return true, w, nil
	})
	return s, &fakecoordination.FakeCoordinationV1{Fake: f}
}

// set makes l what GET answers.
func (s *fakeServer) set(l *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = l
}

func (s *fakeServer) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// next returns the next watch request the store makes.
func (s *fakeServer) next(t *testing.T) watchRequest {
	t.Helper()
	select {
	case r := <-s.watches:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the store opened no watch within 10s")
		return watchRequest{}
	}
}

func leaseOf(holder string, transitions, secs int32, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "leader", Namespace: "ns", UID: "uid-1", ResourceVersion: rv},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder, LeaseTransitions: &transitions, LeaseDurationSeconds: &secs,
		},
	}
}

func watchFor(t *testing.T, store *k8slease.Store) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return store.WatchRelease(ctx, &leasestore.HeldError{Name: "leader", Holder: "a", Token: 3})
}

func requireSilent(t *testing.T, ch <-chan error, why string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("the release watch answered %v %s", err, why)
	default:
	}
}

func requireAnswer(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the release watch said nothing within 10s")
		return nil
	}
}

// TestReleaseWatchRereadsAfterGone: a watch answered 410 Gone (its
// resourceVersion too old) reads the Lease again and watches from the
// read's version; a renewal on the new watch is not a release, the
// holder's release is.
func TestReleaseWatchRereadsAfterGone(t *testing.T) {
	clk := testclock.NewClock(time.Now())
	srv, cli := newFakeServer(t, leaseOf("a", 3, 10, "100"))
	store, err := k8slease.NewStore(cli, "ns", k8slease.WithClock(clk))
	require.NoError(t, err)
	ch := watchFor(t, store)

	first := srv.next(t)
	require.Equal(t, "100", first.rv, "the watch starts from the version read")
	srv.set(leaseOf("a", 3, 10, "205")) // renewed meanwhile
	first.w.Error(&apierrors.NewResourceExpired("too old resource version: 100 (200)").ErrStatus)
	second := srv.next(t)
	require.Equal(t, "205", second.rv, "after 410 Gone the watch starts from a new read")
	require.Equal(t, 2, srv.reads())
	second.w.Modify(leaseOf("a", 3, 10, "206"))
	second.w.Stop() // the API server ends watches now and then
	third := srv.next(t)
	requireSilent(t, ch, "for a live term whose watch was restarted")
	third.w.Modify(leaseOf("", 3, 1, "300"))
	require.NoError(t, requireAnswer(t, ch), "the release")
}

// TestReleaseWatchTimerIsConfirmedByARead: a holder that stops renewing
// ends its term once the record has gone unchanged for its
// leaseDurationSeconds on the store's clock — but only if a read confirms
// it: a renewal the watch missed restarts the wait.
func TestReleaseWatchTimerIsConfirmedByARead(t *testing.T) {
	clk := testclock.NewClock(time.Now())
	srv, cli := newFakeServer(t, leaseOf("a", 3, 2, "100"))
	store, err := k8slease.NewStore(cli, "ns", k8slease.WithClock(clk))
	require.NoError(t, err)
	ch := watchFor(t, store)
	srv.next(t)

	srv.set(leaseOf("a", 3, 2, "150")) // a renewal the watch did not deliver
	require.NoError(t, clk.WaitAdvance(2*time.Second, 10*time.Second, 1))
	srv.next(t) // read again, saw a new version, watches on
	requireSilent(t, ch, "after a renewal the watch missed")
	require.Equal(t, 2, srv.reads())

	require.NoError(t, clk.WaitAdvance(2*time.Second, 10*time.Second, 1))
	require.NoError(t, requireAnswer(t, ch), "the record unchanged for leaseDurationSeconds")
	require.Equal(t, 3, srv.reads(), "the timer's verdict is a read's")
}

// TestReleaseWatchThatKeepsClosingFails: watches that end without an event
// three times in a row end the release watch with an ambiguous error.
func TestReleaseWatchThatKeepsClosingFails(t *testing.T) {
	srv, cli := newFakeServer(t, leaseOf("a", 3, 10, "100"))
	store, err := k8slease.NewStore(cli, "ns")
	require.NoError(t, err)
	ch := watchFor(t, store)
	for range 3 {
		srv.next(t).w.Stop()
	}
	err = requireAnswer(t, ch)
	require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
	var ce *leasestore.CallError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, leasestore.OpWatchRelease, ce.Op)
}
