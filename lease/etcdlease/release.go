package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"sync"

	jujuerrors "github.com/juju/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// errWatchEnded is the cause a release watch yields when etcd's watch
// channel closed without a cancellation saying why.
var errWatchEnded = errors.New("etcd watch channel closed")

// WatchRelease implements leasestore.ReleaseWatcher: an etcd watch of the
// lease's key, from just after the revision at which the refused claim read
// the term, yields nil at the first event that ends the term held.Token (a
// delete, or a put of a new term; a move to a fresh etcd lease keeps the
// term). A watch that cannot go on (no leader, a failed read, the client
// closed) yields an error matching leasestore.ErrUnconfirmed; when ctx
// ends it yields nothing. See DESIGN.md, "Hand-over: the release watch".
func (s *Store) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	out := make(chan error, 1)
	if err := checkHeld(held); err != nil {
		yield(out, err)
		return out
	}
	// Once the term is over, the follower's next claim is sent as a
	// claim, without the read that checks for a live term first, and
	// finds the etcd lease it would grant granted already (spare.go).
	rev, ttl := s.refusedAt.from(held)
	var spare *spareLease
	released := func() {
		s.refusedAt.forgetTerm(held.Name, held.Token)
		if ttl > 0 {
			spare = s.startSpare(ttl)
		}
	}
	then := func() {
		if spare != nil {
			s.grantSpare(spare)
		}
	}
	go watchRelease(ctx, ctx, s.cli, s.Key(held.Name), held, rev, out, released, then)
	return out
}

// WatchRelease implements leasestore.ReleaseWatcher as Store.WatchRelease
// does (a SessionStore's Extend moves a predecessor's key onto its
// session by a put that keeps the create revision: not a release). Close
// ends the store's watches: a watch whose ctx is still live then yields
// an error matching leasestore.ErrNotSent.
func (s *SessionStore) WatchRelease(ctx context.Context, held *leasestore.HeldError) <-chan error {
	out := make(chan error, 1)
	if err := checkHeld(held); err != nil {
		yield(out, err)
		return out
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		yield(out, watchError(held, errClosed))
		return out
	}
	s.wg.Add(1)
	s.mu.Unlock()
	// wctx ends with ctx or the store.
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stop()
		rev, _ := s.refusedAt.from(held)
		watchRelease(ctx, wctx, s.cli, s.Key(held.Name), held, rev, out, nil, nil)
	}()
	return out
}

var (
	_ leasestore.ReleaseWatcher = (*Store)(nil)
	_ leasestore.ReleaseWatcher = (*SessionStore)(nil)
)

// checkHeld says whether held names a term a watch can start from.
func checkHeld(held *leasestore.HeldError) error {
	if held == nil || held.Name == "" || held.Token == 0 {
		return jujuerrors.NotValidf("watch of held lease %+v (must name the lease and its term's token)", held)
	}
	return nil
}

// yield sends the watch's one answer and closes its channel.
func yield(out chan<- error, err error) {
	out <- err
	close(out)
}

// watchError is the error a watch of held yields when it cannot go on.
func watchError(held *leasestore.HeldError, err error) error {
	return &leasestore.CallError{Store: storeName, Op: leasestore.OpWatchRelease, Name: held.Name, Holder: held.Holder, Token: held.Token, Err: err}
}

// watchRelease watches key, from revision rev, for the end of held's
// term and yields the answer to out; released and then, if not nil, are
// called just before and just after it yields that the term is over. It
// yields nothing when caller (the ctx WatchRelease was given) ends; ctx,
// which ends with caller and with the store, runs the watch: its end while
// caller is live yields errClosed.
func watchRelease(caller, ctx context.Context, cli *clientv3.Client, key string, held *leasestore.HeldError, rev int64, out chan<- error, released, then func()) {
	token := int64(held.Token)
	over := func() {
		if released != nil {
			released()
		}
		yield(out, nil)
		if then != nil {
			then()
		}
	}
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ended, compacted, err := followRelease(cli.Watch(wctx, key, clientv3.WithRev(rev)), token)
		// Cancel drains the client's watcher for this ctx.
		cancel()
		switch {
		case caller.Err() != nil:
			return
		case ended:
			over()
			return
		case ctx.Err() != nil:
			yield(out, watchError(held, errClosed))
			return
		case !compacted:
			if cli.Ctx().Err() != nil {
				err = fmt.Errorf("client closed: %w", err)
			}
			yield(out, watchError(held, err))
			return
		}
		// Compacted past rev: the key as it is now tells.
		resp, err := cli.Get(clientv3.WithRequireLeader(ctx), key)
		switch {
		case caller.Err() != nil:
			return
		case ctx.Err() != nil:
			yield(out, watchError(held, errClosed))
			return
		case err != nil:
			yield(out, watchError(held, fmt.Errorf("read after compaction: %w", err)))
			return
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != token:
			over()
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// followRelease reads a watch of the term token's key until an event ends
// the term (over), etcd compacted past the watch's start (compacted), or
// the watch ends otherwise (err, its cause).
func followRelease(wch clientv3.WatchChan, token int64) (over, compacted bool, err error) {
	for wr := range wch {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != token {
				return true, false, nil
			}
		}
		if wr.CompactRevision != 0 {
			return false, true, nil
		}
		if wr.Canceled {
			if err := wr.Err(); err != nil {
				return false, false, err
			}
			return false, false, errWatchEnded
		}
	}
	return false, false, errWatchEnded
}

// refusals remember, per lease name, the revision at which a refused claim
// read the live term, for WatchRelease to start from. A Store's next claim
// of a name refused before reads the key first (see Store.Claim), until
// the watch saw the term end or a claim succeeded. Entries are
// overwritten by the name's next refusal; the map is emptied when full.
type refusals struct {
	mu sync.Mutex
	m  map[string]refusal
}

type refusal struct {
	token uint64
	rev   int64
	ttl   int64 // the TTL, in seconds, the refused claim asked for (a Store's)
}

// note records that name's term token was live at revision rev, refusing
// a claim of ttl seconds (0 if not known).
func (r *refusals) note(name string, token uint64, rev, ttl int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxCached {
		r.m = make(map[string]refusal)
	}
	r.m[name] = refusal{token: token, rev: rev, ttl: ttl}
}

// refused says whether a claim of name was refused last time.
func (r *refusals) refused(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[name]
	return ok
}

// forget drops name's refusal: a claim of it succeeded.
func (r *refusals) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}

// forgetTerm drops name's refusal by the term token, which is over.
func (r *refusals) forgetTerm(name string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.m[name]; ok && f.token == token {
		delete(r.m, name)
	}
}

// from returns the revision a watch of held's term starts at — the one
// after a refusal by the term, or after the term's creation — and the TTL
// that refusal's claim asked for (0 if not known).
func (r *refusals) from(held *leasestore.HeldError) (rev, ttl int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rev = int64(held.Token) + 1
	f, ok := r.m[held.Name]
	if !ok || f.token != held.Token {
		return rev, 0
	}
	return max(rev, f.rev+1), f.ttl
}
