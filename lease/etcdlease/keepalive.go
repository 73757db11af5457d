package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/juju/clock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// session returns the store's session, granting one if there is none
// (one grant at a time: concurrent claims wait for it).
func (s *SessionStore) session(ctx context.Context) (*session, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, errClosed
		case s.sess != nil:
			sess := s.sess
			s.mu.Unlock()
			return sess, nil
		case s.granting != nil:
			granting := s.granting
			s.mu.Unlock()
			select {
			case <-granting:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		granting := make(chan struct{})
		s.granting = granting
		s.mu.Unlock()
		sess, err := s.grant(ctx)
		s.mu.Lock()
		s.granting = nil
		close(granting)
		s.mu.Unlock()
		return sess, err
	}
}

// grant makes a new session and starts keeping it alive; the first one
// also starts the watch of the prefix and the expiry of terms.
func (s *SessionStore) grant(ctx context.Context) (*session, error) {
	sent := s.opts.clock.Now()
	resp, err := s.cli.Grant(ctx, s.ttl)
	if err != nil {
		// A lease granted without our hearing it carries no key and
		// expires by itself.
		return nil, err
	}
	ttl := time.Duration(resp.TTL) * time.Second
	sess := &session{id: resp.ID, ttl: ttl, until: sent.Add(ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	s.sess = sess
	s.wg.Add(1)
	go s.keepAlive(sess)
	if !s.watching {
		// Every key of this and later sessions is created after the
		// grant's revision: the watch from there sees all their ends.
		s.watching = true
		w := &keyWatch{cli: s.cli, clk: s.opts.clock, key: s.prefix, prefix: true, events: s.observe, resync: s.resync}
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			w.run(clientv3.WithRequireLeader(s.ctx), resp.ResponseHeader.Revision+1)
		}()
		go s.expireTerms()
	}
	return sess, nil
}

// sessionLost ends every term of sess: etcd said its lease is gone, and
// etcd deletes a lease's keys as it ends it.
func (s *SessionStore) sessionLost(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.lost {
		return
	}
	sess.lost = true
	if s.sess == sess {
		s.sess = nil
	}
	for _, t := range s.terms {
		if t.sess == sess && t.state != termOver {
			t.end(termOver)
		}
	}
}

// confirm sends the linearizable read that confirms a keep-alive answered
// in raft term kaTerm (see confirmedInTerm), within timeout.
func (s *SessionStore) confirm(kaTerm uint64, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	timer := s.opts.clock.AfterFunc(timeout, cancel)
	defer timer.Stop()
	// Any key will do; the prefix itself is one nobody writes.
	_, readTerm, err := get(ctx, s.cli, s.prefix)
	if err != nil {
		return fmt.Errorf("keep-alive not confirmed by a linearizable read: %w", rpctypes.Error(err))
	}
	return confirmedInTerm(kaTerm, readTerm)
}

// keepAliveTimeout is how long a keep-alive may go unanswered before it is
// unconfirmed.
func keepAliveTimeout(ttl time.Duration) time.Duration {
	return min(ttl/keepAliveWait, maxKeepAliveWait)
}

// keepAlive keeps sess alive on one stream, one keep-alive every TTL/3,
// until etcd says the session is gone or the store closes. Each answer
// moves the session's promise to the keep-alive's send time + TTL; a
// failure marks the session unconfirmed, and the stream is reopened after
// a backoff.
func (s *SessionStore) keepAlive(sess *session) {
	defer s.wg.Done()
	clk := s.opts.clock
	s.mu.Lock()
	ttl := sess.ttl
	next := sess.until.Add(-ttl + ttl/keepAliveEvery)
	s.mu.Unlock()
	retry := backoff.Backoff{Policy: backoff.Policy{
		Min: 100 * time.Millisecond, Max: max(ttl/keepAliveEvery/4, 100*time.Millisecond), Jitter: 0.2}}
	var ka *keepAliveStream
	defer func() { ka.close() }()
	for backoff.SleepUntil(s.ctx.Done(), clk, next.Sub(clk.Now())) {
		if ka == nil {
			ka = newKeepAliveStream(s.ctx, s.cli, clk)
		}
		sent := clk.Now()
		renewed, err := ka.roundTrip(sess.id, keepAliveTimeout(ttl))
		if renewed > 0 && err == nil {
			// One linearizable read per keep-alive, whatever the
			// number of keys: see confirmedInTerm.
			err = s.confirm(ka.term, keepAliveTimeout(ttl))
		}
		switch {
		case renewed <= 0 && (err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)):
			s.sessionLost(sess)
			return
		case err != nil:
			ka.close()
			ka = nil
			s.mu.Lock()
			sess.err = err
			s.mu.Unlock()
			next = clk.Now().Add(retry.Next())
		default:
			retry.Reset()
			ttl = renewed
			s.mu.Lock()
			if !sess.confirmed(clk.Now()) {
				// etcd answers again after an outage (or a pause of
				// this process): holders get their whole duration from
				// now to ask again before a term counts as abandoned.
				sess.reachable = sent
			}
			if until := sent.Add(ttl); until.After(sess.until) {
				sess.until = until
			}
			sess.ttl, sess.err = ttl, nil
			s.mu.Unlock()
			next = sent.Add(ttl / keepAliveEvery)
		}
	}
}

// keepAliveStream is one LeaseKeepAlive stream, opened by its first
// keep-alive, with one request in flight at a time, so that each answer is
// known to answer the request sent last.
type keepAliveStream struct {
	cli    *clientv3.Client
	clk    clock.Clock
	ctx    context.Context
	cancel context.CancelFunc
	stream grpc.BidiStreamingClient[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]
	term   uint64 // the raft term the latest answer was given in
}

// errKeepAliveLate is the cause when a keep-alive was not answered in time.
var errKeepAliveLate = errors.New("keep-alive not answered in time")

func newKeepAliveStream(ctx context.Context, cli *clientv3.Client, clk clock.Clock) *keepAliveStream {
	// A member that loses the raft leader ends the stream rather than
	// leave keep-alives unanswered.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return &keepAliveStream{cli: cli, clk: clk, ctx: ctx, cancel: cancel}
}

// roundTrip sends one keep-alive of id, opening the stream first if it is
// not open, and returns the TTL etcd renewed the lease for: zero when etcd
// no longer has it. All of it must be done within timeout (opening waits
// for a connection when no member is reachable), or the stream is
// cancelled and the keep-alive unconfirmed.
func (k *keepAliveStream) roundTrip(id clientv3.LeaseID, timeout time.Duration) (time.Duration, error) {
	timer := k.clk.AfterFunc(timeout, k.cancel)
	var err error
	if k.stream == nil {
		k.stream, err = pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(k.ctx)
	}
	if err == nil {
		err = k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	}
	var resp *pb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = k.stream.Recv()
	}
	if !timer.Stop() {
		// The stream was cancelled, or is being: an answer that came
		// too late is not trusted, and the stream is reopened.
		return 0, errKeepAliveLate
	}
	if err != nil {
		return 0, rpctypes.Error(err)
	}
	k.term = resp.GetHeader().GetRaftTerm()
	return max(time.Duration(resp.TTL)*time.Second, 0), nil
}

func (k *keepAliveStream) close() {
	if k != nil {
		k.cancel()
	}
}

// expireTerms ends, every expireEvery, the terms whose grant ran out
// unextended, and deletes their keys.
func (s *SessionStore) expireTerms() {
	defer s.wg.Done()
	for backoff.SleepUntil(s.ctx.Done(), s.opts.clock, expireEvery) {
		for _, x := range s.expired() {
			s.deleteExpired(x)
		}
	}
}

// expiredTerm is a term to delete.
type expiredTerm struct {
	name string
	t    *term
}

// expired marks the live terms that ran out as expired and returns every
// term whose key is to be deleted.
func (s *SessionStore) expired() []expiredTerm {
	now := s.opts.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []expiredTerm
	for name, t := range s.terms {
		switch {
		case t.state == termLive && t.abandoned(now):
			t.end(termExpired)
			fallthrough
		case t.state == termExpired, t.state == termUnsure && !now.Before(t.expires):
			due = append(due, expiredTerm{name, t})
		}
	}
	return due
}

// deleteExpired deletes the key of an expired term, guarded by its token;
// for an unconfirmed claim, the key if it is on the claim's session. A
// failure leaves the term for the next round.
func (s *SessionStore) deleteExpired(x expiredTerm) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	timer := s.opts.clock.AfterFunc(expireEvery, cancel)
	defer timer.Stop()
	if s.slots.acquire(ctx) != nil {
		return
	}
	defer s.slots.release()
	key := s.Key(x.name)
	s.mu.Lock()
	token, state, sess := x.t.token, x.t.state, x.t.sess
	s.mu.Unlock()
	if state == termUnsure {
		kv, _, err := get(ctx, s.cli, key)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.terms[x.name] != x.t || x.t.state != termUnsure {
			s.mu.Unlock()
			return // adopted by a claim meanwhile
		}
		if kv == nil || kv.Lease != int64(sess.id) {
			// The unconfirmed put was not applied.
			x.t.end(termOver)
			s.mu.Unlock()
			return
		}
		// It was: the key is ours, and nobody was granted it.
		x.t.token = uint64(kv.CreateRevision)
		x.t.end(termExpired)
		token = x.t.token
		s.mu.Unlock()
	}
	if _, _, err := deleteTerm(ctx, s.cli, key, token); err != nil {
		return
	}
	s.endTerm(x.name, token, termOver)
}
