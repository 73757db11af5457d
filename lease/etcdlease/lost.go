package etcdlease

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// Lost returns a channel that is closed as soon as etcd shows that the term
// g is over: its key was deleted (revoked, or expired with its etcd lease)
// or now belongs to a later term. It is an early warning, pushed by an etcd
// watch, for code that wants to stop leader work before its next Extend or
// check would say so; it never says the term is still held.
//
// The watch runs until ctx ends or the client is closed, when its goroutine
// exits and the channel stays open (cancel ctx when the term no longer
// interests you: nothing leaks). A watch cut off by compaction reads the key afresh and resumes; a
// broken connection is resumed by the client on another endpoint.
func (s *Store) Lost(ctx context.Context, g lease.Grant) <-chan struct{} {
	lost := make(chan struct{})
	go s.watchTerm(ctx, s.Key(g.Name), int64(g.Token), lost)
	return lost
}

const (
	lostRetryMin = 100 * time.Millisecond
	lostRetryMax = 2 * time.Second
)

func (s *Store) watchTerm(ctx context.Context, key string, token int64, lost chan<- struct{}) {
	// Every event after the put that created the term.
	rev := token + 1
	retry := lostRetryMin
	for {
		wctx, cancel := context.WithCancel(ctx)
		for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev)) {
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != token {
					cancel()
					close(lost)
					return
				}
			}
			if wr.Canceled {
				break
			}
			// Every event up to the header's revision has been delivered.
			if wr.Header.Revision >= rev {
				rev = wr.Header.Revision + 1
			}
			if s.watchProgress != nil {
				s.watchProgress(rev - 1)
			}
		}
		// Cancel drains the client's watcher for this ctx.
		cancel()
		if ctx.Err() != nil || s.cli.Ctx().Err() != nil {
			// Done, or the client was closed under us: nothing more
			// can be learnt.
			return
		}
		// The watch ended without an answer (compacted past rev, or
		// cancelled by the server): read the key to learn where we are.
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			// Unconfirmed; back off, then watch again from rev.
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			retry = min(2*retry, lostRetryMax)
			continue
		}
		retry = lostRetryMin
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != token {
			close(lost)
			return
		}
		rev = resp.Header.Revision + 1
	}
}
