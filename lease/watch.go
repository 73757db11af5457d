package lease

import (
	"context"
	"errors"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// releaseWatch is the renewer's watch, through a ReleaseWatcher, of the
// term another holder has.
type releaseWatch struct {
	watcher leasestore.ReleaseWatcher // nil when the Store is not one
	token   uint64                    // the term watched, while armed
	holder  string                    // the holder the refusal named, while armed
	armed   bool
	ch      <-chan error
	stop    context.CancelFunc
	// over and overHolder are the last term whose watch said it was over,
	// not watched again (DESIGN.md, "Followers"); overAt is when.
	over       uint64
	overHolder string
	overAt     time.Time
}

// lossWatch is the renewer's watch of its term through a LossNotifier.
type lossWatch struct {
	notifier leasestore.LossNotifier // nil when the Store is not one
	token    uint64                  // the term watched (or last watched)
	armed    bool                    // a watch of token is running
	lost     <-chan struct{}
	stop     context.CancelFunc
	// signalled: the watch of token fired and the renewer has renewed at
	// once; if the store confirms the term, the signal was spurious.
	signalled bool
}

// follow keeps the term of g watched after the store confirmed it; after a
// spurious signal, only from the next confirmation (DESIGN.md, "Followers").
func (w *lossWatch) follow(parent context.Context, g leasestore.Grant) {
	if w.notifier == nil {
		return
	}
	if g.Token == w.token {
		if w.signalled {
			w.signalled = false
			return
		}
		if w.armed {
			return
		}
	}
	w.end()
	ctx, stop := context.WithCancel(parent) // parent ends on Close
	w.token, w.armed, w.stop = g.Token, true, stop
	w.lost = w.notifier.Lost(ctx, g)
}

// fired records that the watch's channel closed, and ends the watch.
func (w *lossWatch) fired() {
	token := w.token
	w.end()
	w.token, w.signalled = token, true
}

// end stops watching.
func (w *lossWatch) end() {
	if w.stop != nil {
		w.stop()
	}
	*w = lossWatch{notifier: w.notifier}
}

// follow watches the term a refused claim's err names, if the store can
// watch it, and returns the wait before the next claim: the fallback once
// a term while watched, else a claim interval.
func (w *releaseWatch) follow(parent context.Context, err error, cfg Config) time.Duration {
	var held *leasestore.HeldError
	if w.watcher == nil || !errors.As(err, &held) || held.Token == 0 || held.Token == w.over && held.Holder == w.overHolder {
		w.end()
		return cfg.claimDelay()
	}
	if !w.armed || w.token != held.Token || w.holder != held.Holder {
		w.end()
		ctx, stop := context.WithCancel(parent) // parent ends on Close
		w.token, w.holder, w.armed, w.stop = held.Token, held.Holder, true, stop
		w.ch = w.watcher.WatchRelease(ctx, held)
		if w.ch == nil {
			w.end()
			return cfg.claimDelay()
		}
	}
	select {
	case err := <-w.ch:
		return w.signalled(err, cfg)
	default:
		return cfg.fallbackClaimDelay()
	}
}

// signalled ends the watch that yielded err and returns the wait before
// the next claim: a short random delay when the term is over (nil), a
// claim interval when the watch broke.
func (w *releaseWatch) signalled(err error, cfg Config) time.Duration {
	token, holder := w.token, w.holder
	w.end()
	if err != nil {
		return cfg.claimDelay()
	}
	w.over, w.overHolder, w.overAt = token, holder, cfg.Clock.Now()
	return backoff.Jitter(cfg.wakeSpread(), 1)
}

// end stops watching.
func (w *releaseWatch) end() {
	if w.stop != nil {
		w.stop()
	}
	*w = releaseWatch{watcher: w.watcher, over: w.over, overHolder: w.overHolder, overAt: w.overAt}
}
