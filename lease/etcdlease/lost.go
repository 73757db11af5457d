package etcdlease

import (
	"context"
	"time"

	"github.com/juju/clock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/internal/backoff"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Lost returns a channel that is closed as soon as etcd shows that the term
// g is over: its key was deleted (revoked, or expired with its etcd lease),
// now belongs to a later term, or no longer records g's (rewritten by
// another client: its value names another holder, or it was put on an
// etcd lease this Store did not put it on, or on none; see termRecord).
// It is an early warning, pushed by an etcd watch; it never says the term
// is still held. The watch runs until ctx ends or the client is closed,
// when the channel stays open (cancel ctx when the term no longer interests
// you: nothing leaks); one cut off by compaction reads the key and resumes.
func (s *Store) Lost(ctx context.Context, g leasestore.Grant) <-chan struct{} {
	return s.lost(ctx, g, nil)
}

// lost is Lost; progress, if not nil, is told the revision up to which the
// watch has seen every event of the key.
func (s *Store) lost(ctx context.Context, g leasestore.Grant, progress func(rev int64)) <-chan struct{} {
	lost := make(chan struct{})
	ours := s.leaseOurs(g.Name, g.Token)
	// over says whether the key, as an event or a read shows it (nil:
	// deleted), no longer records g's term, and closes lost if so.
	over := func(kv *mvccpb.KeyValue) bool {
		if kv != nil {
			if why, _ := termRecord(g, newKeyValue(kv), ours); why == "" {
				return false
			}
		}
		close(lost)
		return true
	}
	w := &keyWatch{
		cli: s.cli, clk: s.opts.clock, key: s.Key(g.Name),
		events: func(evs []*clientv3.Event) bool {
			for _, ev := range evs {
				kv := ev.Kv
				if ev.Type == mvccpb.DELETE {
					kv = nil
				}
				if over(kv) {
					return true
				}
			}
			return false
		},
		resync: func(kvs []*mvccpb.KeyValue, _ int64) bool {
			if len(kvs) == 0 {
				return over(nil)
			}
			return over(kvs[0])
		},
		progress: progress,
	}
	// Every event after the put that created the term.
	go w.run(ctx, int64(g.Token)+1)
	return lost
}

// watchRetry paces the reads after a watch was cut off, while they fail.
var watchRetry = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// keyWatch follows the events of a key, or of every key under a prefix,
// from a revision on, without missing one: a watch that etcd cuts off
// (compacted past the revision, cancelled by the server) is followed by a
// read of the key(s) and a new watch from the read's revision.
type keyWatch struct {
	cli    *clientv3.Client
	clk    clock.Clock
	key    string
	prefix bool // watch every key under key
	// events is given every batch of events in revision order; it returns
	// true when the watch has learnt what it waited for.
	events func(evs []*clientv3.Event) (done bool)
	// resync is given the key(s) as read at revision rev after the watch
	// was cut off; it returns true when the watch is done.
	resync func(kvs []*mvccpb.KeyValue, rev int64) (done bool)
	// progress, if not nil, is told the revision up to which every event
	// has been given to events.
	progress func(rev int64)
}

// run watches from revision rev until the watch is done, ctx ends or the
// client is closed.
func (w *keyWatch) run(ctx context.Context, rev int64) {
	var opts []clientv3.OpOption
	if w.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	retry := backoff.Backoff{Policy: watchRetry}
	for {
		wctx, cancel := context.WithCancel(ctx)
		for wr := range w.cli.Watch(wctx, w.key, append(opts, clientv3.WithRev(rev))...) {
			if len(wr.Events) > 0 && w.events(wr.Events) {
				cancel()
				return
			}
			if wr.Canceled {
				break
			}
			// Every event up to the header's revision has been delivered.
			if wr.Header.Revision >= rev {
				rev = wr.Header.Revision + 1
			}
			if w.progress != nil {
				w.progress(rev - 1)
			}
		}
		// Cancel drains the client's watcher for this ctx.
		cancel()
		if ctx.Err() != nil || w.cli.Ctx().Err() != nil {
			// Done, or the client was closed under us: nothing more
			// can be learnt.
			return
		}
		// The watch ended without an answer (compacted past rev, or
		// cancelled by the server): read to learn where we are.
		resp, err := w.cli.Get(ctx, w.key, opts...)
		if err != nil {
			// Unconfirmed; back off, then watch again from rev.
			if backoff.Sleep(ctx, w.clk, retry.Next()) != nil {
				return
			}
			continue
		}
		retry.Reset()
		if w.resync(resp.Kvs, resp.Header.Revision) {
			return
		}
		rev = resp.Header.Revision + 1
	}
}
