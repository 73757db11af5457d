package apiservertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// leaders records, in a history.Recorder, what each party was told — a
// tracker's statuses, its Lead runs and its releases; a client-go
// candidate's leadership from OnStartedLeading to OnStoppedLeading — and
// tells the test when a party starts leading.
type leaders struct {
	rec     history.Recorder
	started chan string
}

// TestInteropWithClientGo: a coldstart tracker and a client-go
// leaderelection candidate contend for one Lease for ~20 s. Whenever one
// has led for a while, it stops — without releasing, or releasing, in
// turn — and a new candidate of its kind starts once the other kind leads.
// The history checker (leasetest/history) finds the history safe — no two
// parties leading or promised at one instant, coldstart's tokens in order,
// no ErrNotLeader while a promise stood — and each kind leads more than
// once.
//
// What the checker can judge of client-go: its callbacks carry no promise
// and no token, so a client-go leadership is recorded as a Lead run with
// a zero Status — it takes part in the overlap rule (for the whole run)
// and in no other: TokenOrder orders coldstart's terms among themselves
// (their tokens, leaseTransitions, also count client-go's takeovers, so
// they increase across them), and cannot say whether a client-go term
// came in token order.
func TestInteropWithClientGo(t *testing.T) {
	const (
		name     = "interop"
		run      = 20 * time.Second
		tenure   = 1500 * time.Millisecond // how long a leader leads before it stops
		duration = 1500 * time.Millisecond // the tracker's Duration: leaseDurationSeconds 3
	)
	cs := newClient(t, "")
	ns := newNamespace(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	// started is buffered: candidates never wait for the test to read it.
	rec := &leaders{started: make(chan string, 64)}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(kind string, n int) {
		id := fmt.Sprintf("%s-%d", kind, n)
		release := n%2 == 1
		var store leasestore.Store
		if kind == "coldstart" {
			store = newStore(t, cs, ns)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if store != nil {
				runTracker(ctx, t, store, name, id, duration, tenure, release, rec)
			} else {
				runClientGo(ctx, t, cs, ns, name, id, 2*duration, tenure, release, rec)
			}
		}()
	}
	start("coldstart", 0)
	start("client-go", 0)
	counts := map[string]int{}
	for ctx.Err() == nil {
		select {
		case who := <-rec.started:
			kind := who[:strings.LastIndex(who, "-")]
			other := map[string]string{"coldstart": "client-go", "client-go": "coldstart"}[kind]
			counts[kind]++
			// This leader will stop. The other kind's candidate that
			// just stopped (there is none at the first leadership) is
			// replaced now, so that it contends while this one leads.
			if counts[other] > 0 || counts[kind] > 1 {
				start(other, counts[other])
			}
		case <-ctx.Done():
		}
	}
	wg.Wait() // every candidate has seen ctx end and recorded its answers
	for _, v := range rec.rec.Verify() {
		t.Error(v)
	}
	require.GreaterOrEqual(t, counts["coldstart"], 2, "coldstart led %d times", counts["coldstart"])
	require.GreaterOrEqual(t, counts["client-go"], 2, "client-go led %d times", counts["client-go"])
}

var errStepDown = errors.New("stepping down")

// runTracker runs one coldstart candidate until ctx ends or it has led
// for tenure, and records its statuses, its Lead run and its release.
func runTracker(ctx context.Context, t *testing.T, store leasestore.Store, name, id string, d, tenure time.Duration, release bool, rec *leaders) {
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: name, Holder: id, Duration: d, ReleaseOnClose: release,
	})
	if err != nil {
		t.Error(err)
		return
	}
	stop := make(chan struct{})
	w := watch(tr, stop)
	defer func() {
		asked := time.Now()
		tr.Close()
		if release {
			// Close released the term: the step-down that ends its promises.
			rec.rec.Record(history.Answer{Node: id, Call: history.CallStepDown, Asked: asked, Returned: time.Now()})
		}
		close(stop)
		<-w.done
		w.record(&rec.rec, id)
	}()
	// Lead runs the leader each time the tracker holds the lease, and
	// returns when ctx ends or with the leader's own errStepDown.
	err = tr.Lead(ctx, func(lctx context.Context, st lease.Status) error {
		begun := time.Now()
		rec.started <- id
		var err error
		defer func() {
			rec.rec.Record(history.Answer{Node: id, Call: history.CallLead, Status: st, Err: err, Asked: begun, Returned: time.Now()})
		}()
		select {
		case <-lctx.Done():
			err = context.Cause(lctx)
			return lctx.Err()
		case <-time.After(tenure):
			return errStepDown
		}
	})
	if err != nil && !errors.Is(err, errStepDown) && ctx.Err() == nil {
		t.Errorf("%s: Lead: %v", id, err)
	}
}

// runClientGo runs one client-go leaderelection candidate until ctx ends or
// it has led for tenure, and records its leadership as a Lead run with a
// zero Status (client-go tells no promise or token): from
// OnStartedLeading to OnStoppedLeading — but with ReleaseOnCancel to the
// moment its leader code stopped, just before it cancels its ctx.
// client-go calls OnStoppedLeading only after its release
// (LeaderElector.Run: renew releases, then the deferred OnStoppedLeading
// runs), so a successor woken by the release may lead before it; and
// ReleaseOnCancel's contract is that the guarded code has completed
// before the ctx is cancelled.
func runClientGo(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, id string, leaseDuration, tenure time.Duration, release bool, rec *leaders) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu             sync.Mutex // OnStoppedLeading runs while OnStartedLeading may
		led            bool
		begun, stopped time.Time
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: ns},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   leaseDuration,
		RenewDeadline:   leaseDuration * 2 / 3,
		RetryPeriod:     leaseDuration / 6,
		ReleaseOnCancel: release,
		Name:            id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				begun, led = time.Now(), true
				mu.Unlock()
				rec.started <- id
				select {
				case <-lctx.Done():
				case <-time.After(tenure):
					if release {
						mu.Lock()
						stopped = time.Now()
						mu.Unlock()
					}
					cancel()
					<-lctx.Done()
				}
			},
			OnStoppedLeading: func() {
				mu.Lock()
				defer mu.Unlock()
				if !led {
					return
				}
				end := time.Now()
				if !stopped.IsZero() {
					end = stopped
				}
				rec.rec.Record(history.Answer{Node: id, Call: history.CallLead, Asked: begun, Returned: end})
			},
		},
	})
	if err != nil {
		t.Error(err)
		return
	}
	le.Run(ctx)
}
