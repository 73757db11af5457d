package apiservertest

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
)

// interval is one party's time as leader, as the party itself saw it: from
// when its leader code started to when that code saw its ctx end.
type interval struct {
	who        string
	start, end time.Time
}

// leaders records leading intervals, and tells the test when a party
// starts leading.
type leaders struct {
	mu      sync.Mutex
	done    []interval
	open    map[string]time.Time
	started chan string
}

func (l *leaders) begin(who string) {
	l.mu.Lock()
	l.open[who] = time.Now()
	l.mu.Unlock()
	l.started <- who
}

func (l *leaders) end(who string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = append(l.done, interval{who, l.open[who], now})
	delete(l.open, who)
}

// TestInteropWithClientGo: a coldstart tracker and a client-go
// leaderelection candidate contend for one Lease for ~20 s. Whenever one
// has led for a while, it stops — without releasing, or releasing, in
// turn — and a new candidate of its kind starts once the other kind leads.
// The leading intervals of all parties never overlap, and each kind leads
// more than once.
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
	rec := &leaders{open: make(map[string]time.Time), started: make(chan string, 64)}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(kind string, n int) {
		id := fmt.Sprintf("%s-%d", kind, n)
		release := n%2 == 1
		var store lease.Store
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
	wg.Wait() // every candidate has seen ctx end and recorded its interval
	rec.mu.Lock()
	defer rec.mu.Unlock()
	all := append([]interval(nil), rec.done...)
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	for _, iv := range all {
		t.Logf("%-12s led %v from +%v", iv.who, iv.end.Sub(iv.start).Round(time.Millisecond), iv.start.Sub(all[0].start).Round(time.Millisecond))
	}
	for i := 1; i < len(all); i++ {
		for _, prev := range all[:i] {
			if cur := all[i]; cur.start.Before(prev.end) {
				t.Errorf("%s led from +%v while %s still led (until +%v)", cur.who,
					cur.start.Sub(all[0].start), prev.who, prev.end.Sub(all[0].start))
			}
		}
	}
	require.GreaterOrEqual(t, counts["coldstart"], 2, "coldstart led %d times", counts["coldstart"])
	require.GreaterOrEqual(t, counts["client-go"], 2, "client-go led %d times", counts["client-go"])
}

var errStepDown = errors.New("stepping down")

// runTracker runs one coldstart candidate until ctx ends or it has led
// for tenure.
func runTracker(ctx context.Context, t *testing.T, store lease.Store, name, id string, d, tenure time.Duration, release bool, rec *leaders) {
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: name, Holder: id, Duration: d, ReleaseOnClose: release,
	})
	if err != nil {
		t.Error(err)
		return
	}
	defer tr.Close()
	// Lead runs the leader each time the tracker holds the lease, and
	// returns when ctx ends or with the leader's own errStepDown.
	err = tr.Lead(ctx, func(lctx context.Context, _ lease.Status) error {
		rec.begin(id)
		defer rec.end(id)
		select {
		case <-lctx.Done():
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
// it has led for tenure.
func runClientGo(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, id string, leaseDuration, tenure time.Duration, release bool, rec *leaders) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
				rec.begin(id)
				defer rec.end(id)
				select {
				case <-lctx.Done():
				case <-time.After(tenure):
					cancel()
					<-lctx.Done()
				}
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Error(err)
		return
	}
	le.Run(ctx)
}
