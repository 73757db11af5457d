package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// An outage of every client link, as a user reruns it against their own
// tracker settings: both trackers reach etcd through the member's link,
// and each of the link's faults lasts until etcd itself has expired the
// holder's term. Throughout, the holder is never told "not leader" (nobody
// could have claimed the lease) and answers Unknown once its promise ran
// out; after the heal one of them holds the lease again; the history
// checker finds every answer safe. A link slowed past the trackers' call
// timeout is an outage too, but one whose calls all arrive, late.
func TestLinkOutageAgainstTrackers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*etcdtest.Link)
	}{
		{"cut", (*etcdtest.Link).Cut},
		{"refuse", (*etcdtest.Link).Refuse},
		{"pause", (*etcdtest.Link).Pause},
		{"slow", func(l *etcdtest.Link) { l.Slow(time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testLinkOutage(t, tc.fault)
		})
	}
}

func testLinkOutage(t *testing.T, fault func(*etcdtest.Link)) {
	const d = 500 * time.Millisecond // terms of 1 s
	m := etcdtest.Start(t)
	link := m.Link()
	store, err := etcdlease.NewStore(link.Client(), "/outage/")
	require.NoError(t, err)
	var rec history.Recorder
	newTracker := func(holder string) *lease.Tracker {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: holder, Duration: d})
		require.NoError(t, err)
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	check := func(node string, tr *lease.Tracker) (lease.Status, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		asked := time.Now()
		st, err := tr.Check(ctx, 0)
		rec.Record(history.Answer{Node: node, Call: history.CallCheck, Status: st, Err: err,
			Asked: asked, Returned: time.Now()})
		return st, err
	}
	var last string
	a := newTracker("a")
	await(t, "a holds the lease", func() bool {
		st, err := check("a", a)
		last = fmt.Sprintf("%v, %v", st.State, err)
		return st.State == lease.Held
	}, &last)
	b := newTracker("b")
	await(t, "b learns that a holds the lease", func() bool {
		st, err := check("b", b)
		last = fmt.Sprintf("%v, %v", st.State, err)
		return st.State == lease.NotHeld
	}, &last)

	fault(link)
	// Until etcd has expired a's term (its key is gone) and a has said it
	// cannot know. b was told that a holds the lease and answers so from
	// its cache: that stands.
	var unknown bool
	var told []string // answers "not leader" to a
	await(t, "etcd expires a's term while a answers Unknown", func() bool {
		st, err := check("a", a)
		switch {
		case errors.Is(err, lease.ErrNotLeader):
			told = append(told, err.Error())
		case st.State == lease.Unknown && errors.Is(err, lease.ErrRenewalFailed):
			unknown = true
		}
		check("b", b)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, getErr := m.Client().Get(ctx, store.Key("singular"))
		last = fmt.Sprintf("a: %v, %v; the key: %v, %v", st.State, err, resp, getErr)
		return unknown && getErr == nil && len(resp.Kvs) == 0
	}, &last)
	require.Empty(t, told, "a was told it is not the leader during the outage")

	link.Heal()
	await(t, "someone holds the lease after the heal", func() bool {
		sa, errA := check("a", a)
		sb, errB := check("b", b)
		last = fmt.Sprintf("a: %v, %v; b: %v, %v", sa.State, errA, sb.State, errB)
		return sa.State == lease.Held || sb.State == lease.Held
	}, &last)
	for _, v := range rec.Verify() {
		t.Error(v)
	}
}

// await calls cond every 20 ms until it returns true, and fails the test
// with what and *last if it has not within 20 s.
func await(t *testing.T, what string, cond func() bool, last *string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s; last: %s", what, *last)
		}
		<-time.After(20 * time.Millisecond)
	}
}
