package k8slease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	jujuerrors "github.com/juju/errors"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

var _ leasestore.ReleaseWatcher = (*Store)(nil)

// maxQuietRestarts is how many attempts in a row may fail (a read or a
// watch request without an answer, a watch closed without delivering an
// event) before WatchRelease gives up with an error.
const maxQuietRestarts = 3

// errWatchClosed is the cause a release watch yields when the API server
// kept closing its watch.
var errWatchClosed = errors.New("closed by the API server")

// watchReadTimeout bounds each read of the Lease a release watch makes
// (client-go retries a GET on a broken connection for ~10 s): a watch that
// cannot read says so, and its follower polls.
const watchReadTimeout = 5 * time.Second

// WatchRelease implements leasestore.ReleaseWatcher: it watches the Lease
// object of held.Name and yields nil as soon as the term held names is over
// (the holder changed or was cleared, a new term began, the object was
// deleted or re-created, or the record went unchanged for its
// leaseDurationSeconds, counted as Claim counts it and confirmed by a GET).
// A term already over when the watch begins yields nil at once. Three
// failed attempts in a row yield a *leasestore.CallError matching
// leasestore.ErrUnconfirmed; an invalid held (Token 0, as on a Lease
// client-go created, among them) is NotValid. When ctx ends, the watch ends
// and yields nothing. The watch only wakes a follower: its claim still
// waits out the record. See DESIGN.md, "Hand-over: the release watch".
func (s *Store) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	out := make(chan error, 1)
	if held == nil || checkName(held.Name) != nil || held.Holder == "" || held.Token == 0 || held.Token > math.MaxInt32 {
		yield(out, jujuerrors.NotValidf("watch of held lease %+v (must name a Lease, its holder and its term's token in [1, %d], as a refused Claim does)", held, math.MaxInt32))
		return out
	}
	go func() {
		if err := s.watchRelease(ctx, held); ctx.Err() == nil {
			if err != nil {
				err = &leasestore.CallError{Store: storeName(s.namespace), Op: leasestore.OpWatchRelease, Name: held.Name, Holder: held.Holder, Token: held.Token, Err: err}
			}
			yield(out, err)
		}
	}()
	return out
}

// yield sends a watch's one answer and closes its channel.
func yield(out chan<- error, err error) {
	out <- err
	close(out)
}

// watchRelease watches the Lease until held's term is over (nil) or the
// watch cannot go on (its cause). It returns when ctx ends, with anything.
func (s *Store) watchRelease(ctx context.Context, held *leasestore.HeldError) error {
	var (
		uid   types.UID // the object held's term is in
		quiet int       // watches in a row that closed without an event
	)
	cur := s.last(held.Name)
	if !isHeld(cur, held) {
		cur = nil
	}
	for {
		end, events, err := watchClosed, 0, error(nil)
		if cur == nil {
			rctx, cancel := context.WithTimeout(ctx, watchReadTimeout)
			l, since, rerr := s.read(rctx, held.Name)
			cancel()
			switch {
			case rerr != nil:
				err = fmt.Errorf("read: %w", rerr)
			case !isHeld(l, held) || uid != "" && l.UID != uid:
				return nil
			case s.clk.Now().Sub(since) >= durationOf(l):
				return nil // unchanged for its leaseDurationSeconds: Claim takes it
			default:
				cur = l
			}
		}
		if cur != nil {
			uid = cmp.Or(uid, cur.UID) // the object the term was first seen in
			end, events, err = s.watchFrom(ctx, held, uid, cur)
		}
		switch {
		case ctx.Err() != nil || end == watchOver:
			return nil
		case events > 0 || end == watchTimer:
			quiet = 0
		default: // a failed read or watch request, or a watch that ended with nothing delivered
			if quiet++; quiet >= maxQuietRestarts {
				return fmt.Errorf("%d attempts in a row failed: %w", quiet, cmp.Or(err, errWatchClosed))
			}
		}
		cur = nil // read it again: the timer's verdict, or a new watch
	}
}

// watchFrom watches held's term from cur, the Lease in object uid, and
// says how that ended (see followRelease).
func (s *Store) watchFrom(ctx context.Context, held *leasestore.HeldError, uid types.UID, cur *coordinationv1.Lease) (watchEnd, int, error) {
	// The request, not the watch, has watchReadTimeout to answer.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	late := time.AfterFunc(watchReadTimeout, cancel)
	w, err := s.leases.Watch(wctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", held.Name).String(),
		ResourceVersion:     cur.ResourceVersion,
		AllowWatchBookmarks: true,
	})
	if !late.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		if w != nil {
			w.Stop()
		}
		return watchClosed, 0, fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	return s.followRelease(ctx, w, held, uid, cur)
}

// watchEnd is why followRelease stopped reading a watch.
type watchEnd int

const (
	watchClosed watchEnd = iota // closed, 410 Gone, failed, or ctx ended
	watchOver                   // an event ended the term
	watchTimer                  // unchanged for its leaseDurationSeconds, unless a GET says otherwise
)

// followRelease reads watch w of held's term, which cur (in object uid)
// records, until an event ends the term (watchOver), the record has gone
// unchanged for its leaseDurationSeconds (watchTimer: a GET must confirm
// it), or the watch closes or answers 410 Gone (watchClosed: the caller
// reads again) or fails (err). events counts the events it delivered
// (renewals, bookmarks).
func (s *Store) followRelease(ctx context.Context, w watch.Interface, held *leasestore.HeldError, uid types.UID, cur *coordinationv1.Lease) (end watchEnd, events int, err error) {
	since := s.saw(cur, s.clk.Now())
	timer := s.clk.NewTimer(durationOf(cur) - s.clk.Now().Sub(since))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return watchClosed, events, nil
		case <-timer.Chan():
			return watchTimer, events, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return watchClosed, events, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					return watchClosed, events, fmt.Errorf("watch event %s of a %T, not a Lease", ev.Type, ev.Object)
				}
				since := s.saw(l, s.clk.Now())
				if !isHeld(l, held) || l.UID != uid {
					return watchOver, events, nil
				}
				// A renewal of the term: its wait starts again.
				events++
				timer.Reset(durationOf(l) - s.clk.Now().Sub(since))
			case watch.Deleted:
				s.vanished(held.Name)
				return watchOver, events, nil
			case watch.Bookmark:
				events++
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return watchClosed, events, nil
				}
				return watchClosed, events, err
			}
		}
	}
}

// isHeld reports whether l records the term held names: its holder's, or
// the first claim of its preferredHolder on a release (see Claim).
func isHeld(l *coordinationv1.Lease, held *leasestore.HeldError) bool {
	return l != nil && standing(l) == held.Holder && tokenOf(l) == held.Token
}

// heldError is the refusal of a claim of cur, whose term t (see termOf)
// has the first claim: it names the term, for WatchRelease.
func heldError(cur *coordinationv1.Lease, t leasestore.Grant) *leasestore.HeldError {
	return &leasestore.HeldError{Name: cur.Name, Holder: t.Holder, Token: t.Token}
}
