package apiservertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// newTracker starts a tracker, closed at cleanup, and follows its changes.
func newTracker(t *testing.T, cfg lease.Config) (*lease.Tracker, *watcher) {
	t.Helper()
	tr, err := lease.NewTracker(cfg)
	require.NoError(t, err)
	stop := make(chan struct{})
	w := watch(tr, stop)
	t.Cleanup(func() {
		tr.Close()
		close(stop)
		<-w.done
	})
	return tr, w
}

// observed is one status a tracker published, and when the test saw it.
type observed struct {
	lease.Status
	at time.Time
}

// watcher records every status a tracker publishes. (It is the one place
// these tests follow a tracker's changes.)
type watcher struct {
	mu   sync.Mutex
	log  []observed
	bump chan struct{} // closed and replaced at each new status
	done chan struct{} // closed when the watch stops
}

// watch follows tr's statuses through Current until stop closes (after
// Close a tracker's status channel never closes, so the test stops it).
func watch(tr *lease.Tracker, stop <-chan struct{}) *watcher {
	w := &watcher{bump: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			st, changed := tr.Current()
			w.mu.Lock()
			w.log = append(w.log, observed{st, time.Now()})
			close(w.bump)
			w.bump = make(chan struct{})
			w.mu.Unlock()
			select {
			case <-changed:
			case <-stop:
				return
			}
		}
	}()
	return w
}

// mark is where the statuses published from now on begin.
func (w *watcher) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.log)
}

// since returns the statuses published from mark on.
func (w *watcher) since(mark int) []observed {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]observed(nil), w.log[mark:]...)
}

// await returns the first status from mark on that ok accepts, waiting up
// to within for it.
func (w *watcher) await(t *testing.T, mark int, within time.Duration, what string, ok func(lease.Status) bool) observed {
	t.Helper()
	timeout := time.After(within)
	for next := mark; ; {
		w.mu.Lock()
		log, bump := w.log, w.bump
		w.mu.Unlock()
		for ; next < len(log); next++ {
			if ok(log[next].Status) {
				return log[next]
			}
		}
		select {
		case <-bump:
		case <-w.done:
			t.Fatalf("tracker closed before %s; statuses: %+v", what, log[mark:])
		case <-timeout:
			t.Fatalf("no %s within %v; statuses: %+v", what, within, log[mark:])
		}
	}
}

// checked is tr.Check(ctx, d), its answer recorded in rec as node's.
func checked(ctx context.Context, rec *history.Recorder, node string, tr *lease.Tracker, d time.Duration) (lease.Status, error) {
	asked := time.Now()
	st, err := tr.Check(ctx, d)
	rec.Record(history.Answer{Node: node, Call: history.CallCheck, Status: st, Err: err, Asked: asked, Returned: time.Now()})
	return st, err
}

// record adds every status w saw to rec, as node's answers to Current.
func (w *watcher) record(rec *history.Recorder, node string) {
	for _, o := range w.since(0) {
		rec.Record(history.Answer{Node: node, Call: history.CallCurrent, Status: o.Status, Returned: o.at})
	}
}

// lastUntil is the latest Until of a Held status from mark on: the end of
// the tracker's promise.
func (w *watcher) lastUntil(mark int) time.Time {
	var until time.Time
	for _, o := range w.since(mark) {
		if o.State == lease.Held && o.Until.After(until) {
			until = o.Until
		}
	}
	return until
}

func heldBy(holder string) func(lease.Status) bool {
	return func(st lease.Status) bool { return st.State == lease.Held && st.Holder == holder }
}

func notHeldNaming(holder string) func(lease.Status) bool {
	return func(st lease.Status) bool { return st.State == lease.NotHeld && st.Holder == holder }
}

// checkCtx is a ctx for one Check.
func checkCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errorsAsNotLeader is errors.As for a *lease.NotLeaderError.
func errorsAsNotLeader(err error) (*lease.NotLeaderError, bool) {
	var nl *lease.NotLeaderError
	ok := errors.As(err, &nl)
	return nl, ok
}
