package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/juju/clock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

// session is one etcd lease that carries a SessionStore's keys, and what
// etcd has promised for it. One goroutine (keepAlive) keeps it alive.
//
// Its invariant: until is a promise made by a quorum, set by the grant and
// moved only by a keep-alive confirmed in the same raft term and resumable;
// one confirmed but not resumable retires the session. See DESIGN.md,
// "SessionStore: every promise from one session".
type session struct {
	id clientv3.LeaseID

	mu sync.Mutex
	// life is the raft term of the grant, and the send time and TTL of
	// the grant or of the latest confirmed keep-alive.
	life leaseLife
	ttl  time.Duration // as etcd granted or last renewed it
	// until is when etcd's promise ends at the earliest: the send time of
	// the latest confirmed keep-alive (or of the grant) plus the TTL.
	until time.Time
	// err is why the latest keep-alive was not confirmed; nil once one is.
	err error
	// failedAt is when the session became unconfirmed (err became
	// non-nil).
	failedAt time.Time
	// reachable is the send time of the first keep-alive confirmed after
	// a time the session was not confirmed (zero if it always was): the
	// store has been able to reach etcd since.
	reachable time.Time
	lost      bool // etcd said the lease is gone, confirmed in the same raft term
	retired   bool // a keep-alive was confirmed that must not be resumed: see session
}

// promise is a snapshot of a session's state, for the term table.
type promise struct {
	id        clientv3.LeaseID // zero: no session
	ttl       time.Duration
	until     time.Time
	err       error
	reachable time.Time
	lost      bool
}

// confirmedAt says whether etcd's promise stands at now: the latest
// keep-alive was confirmed, and the promise has not run out.
func (p promise) confirmedAt(now time.Time) bool {
	return p.id != 0 && !p.lost && p.err == nil && now.Before(p.until)
}

// unconfirmed says why the session cannot back a grant now.
func (p promise) unconfirmed() error {
	switch {
	case p.id == 0 || p.lost:
		return errors.New("etcd lost the session's lease")
	case p.err != nil:
		return fmt.Errorf("session keep-alive unconfirmed: %w", p.err)
	}
	return fmt.Errorf("no session keep-alive confirmed since %v", p.until.Add(-p.ttl))
}

// newSession is the session etcd granted as id for ttl, asked at sent and
// answered in raft term raftTerm.
func newSession(id clientv3.LeaseID, ttl time.Duration, sent time.Time, raftTerm uint64) *session {
	return &session{id: id, ttl: ttl, until: sent.Add(ttl), life: leaseLife{raftTerm: raftTerm, confirmed: sent, ttl: ttl}}
}

func (sess *session) promise() promise {
	if sess == nil {
		return promise{}
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return promise{id: sess.id, ttl: sess.ttl, until: sess.until, err: sess.err, reachable: sess.reachable, lost: sess.lost}
}

// renewed records a confirmed keep-alive sent at sent that renewed the
// lease for ttl; now is when it was confirmed. If the session was
// unconfirmed, it says so and for how long it was.
func (sess *session) renewed(sent, now time.Time, ttl time.Duration) (unconfirmed time.Duration, again bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.err != nil {
		unconfirmed, again = now.Sub(sess.failedAt), true
	}
	if sess.err != nil || !now.Before(sess.until) {
		// etcd answers again after an outage (or a pause of this
		// process): holders get their whole duration from now to ask
		// again before a term counts as abandoned.
		sess.reachable = sent
	}
	if until := sent.Add(ttl); until.After(sess.until) {
		sess.until = until
	}
	if sent.After(sess.life.confirmed) {
		sess.life.confirmed = sent
	}
	sess.ttl, sess.life.ttl, sess.err = ttl, ttl, nil
	return unconfirmed, again
}

// resumable says whether a keep-alive sent at sent and confirmed in raft
// term kaRaftTerm may renew the promise (see leaseLife.resumable); when not,
// the session is retired for good.
func (sess *session) resumable(kaRaftTerm uint64, sent time.Time) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if !sess.retired && !sess.life.resumable(kaRaftTerm, sent) {
		sess.retired = true
	}
	return !sess.retired
}

// failed records that a keep-alive was not confirmed at now, for err; it
// says whether the session was confirmed until then (an outage begins).
func (sess *session) failed(err error, now time.Time) (news bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if news = sess.err == nil; news {
		sess.failedAt = now
	}
	sess.err = err
	return news
}

// markLost records that etcd no longer has the lease; it says whether it
// was news.
func (sess *session) markLost() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	news := !sess.lost
	sess.lost = true
	return news
}

// Keep-alive timing, as fractions of the session's TTL.
const (
	keepAliveEvery = 3 // a keep-alive every TTL/3
	// A keep-alive (or its confirming read) not answered within
	// TTL/keepAliveWait (at most maxKeepAliveWait) is unconfirmed: the
	// stream is reopened.
	keepAliveWait    = 6
	maxKeepAliveWait = 5 * time.Second
)

// keepAliveTimeout is how long a keep-alive, and then its confirming read,
// may go unanswered before it is unconfirmed.
func keepAliveTimeout(ttl time.Duration) time.Duration {
	return min(ttl/keepAliveWait, maxKeepAliveWait)
}

// keepAlive keeps the session alive on one stream, one keep-alive every TTL/3,
// each confirmed by a committed read of confirmKey, until etcd says the
// lease is gone, confirmed in the same raft term (then it calls lost), a
// confirmed keep-alive must not be resumed (then it calls retired), or
// ctx ends. A failure marks the session unconfirmed, and the stream is
// reopened after a backoff. It logs to log when the session becomes
// unconfirmed and when it is confirmed again, not at each failed retry.
func (sess *session) keepAlive(ctx context.Context, cli *clientv3.Client, clk clock.Clock, confirmKey string, log storeLog, lost, retired func()) {
	p := sess.promise()
	ttl := p.ttl
	next := p.until.Add(-ttl + ttl/keepAliveEvery)
	retry := backoff.Backoff{Policy: backoff.Policy{
		Min: 100 * time.Millisecond, Max: max(ttl/keepAliveEvery/4, 100*time.Millisecond), Jitter: 0.2}}
	var ka *keepAliveStream
	defer func() { ka.stop() }()
	for backoff.SleepUntil(ctx.Done(), clk, next.Sub(clk.Now())) {
		if ka == nil {
			ka = newKeepAliveStream(ctx, cli, clk)
		}
		sent := clk.Now()
		renewed, err := ka.roundTrip(sess.id, keepAliveTimeout(ttl))
		switch {
		case err == nil:
			// One committed read per keep-alive, whatever the number
			// of keys; it confirms a "no such lease" (TTL 0) as well as
			// a renewal.
			err = confirm(ctx, cli, clk, confirmKey, ka.raftTerm, keepAliveTimeout(ttl))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// The same answer as an error, without a header to confirm
			// it by: unconfirmed, until a keep-alive on a new stream
			// says it again with one.
			err = fmt.Errorf("%w: %w", errNotFoundUnconfirmed, err)
		}
		switch {
		case renewed <= 0 && err == nil:
			if sess.markLost() {
				lost()
			}
			return
		case err != nil:
			ka.stop()
			ka = nil
			if sess.failed(err, clk.Now()) {
				log.log(slog.LevelWarn, msgSessionUnconfirmed, sessionAttr(sess.id),
					slog.Time("until", sess.promise().until), slog.Any("err", err))
			}
			next = clk.Now().Add(retry.Next())
		case !sess.resumable(ka.raftTerm, sent):
			// Renewed, but some deposed leader may still revoke it:
			// its keys move to a new session (see session).
			retired()
			return
		default:
			retry.Reset()
			ttl = renewed
			if unconfirmed, again := sess.renewed(sent, clk.Now(), ttl); again {
				log.log(slog.LevelInfo, msgSessionConfirmed, sessionAttr(sess.id),
					slog.Time("until", sess.promise().until), slog.Duration("unconfirmed", unconfirmed))
			}
			next = sent.Add(ttl / keepAliveEvery)
		}
	}
}

// confirm sends the committed read of key (readCommitted) that confirms a
// keep-alive answered in raft term kaRaftTerm (see confirmedInRaftTerm),
// within timeout. A keep-alive's "no such lease" is confirmed alike (see
// DESIGN.md, "Confirming that an etcd lease is gone").
func confirm(ctx context.Context, cli *clientv3.Client, clk clock.Clock, key string, kaRaftTerm uint64, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := clk.AfterFunc(timeout, cancel)
	defer timer.Stop()
	_, readRaftTerm, err := readCommitted(ctx, cli, key)
	if err != nil {
		return fmt.Errorf("keep-alive not confirmed by a committed read: %w", rpctypes.Error(err))
	}
	return confirmedInRaftTerm(kaRaftTerm, readRaftTerm)
}

// keepAliveStream is one LeaseKeepAlive stream, opened by its first
// keep-alive, with one request in flight at a time, so that each answer is
// known to answer the request sent last.
type keepAliveStream struct {
	cli      *clientv3.Client
	clk      clock.Clock
	ctx      context.Context
	cancel   context.CancelFunc
	stream   grpc.BidiStreamingClient[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]
	raftTerm uint64 // the raft term the latest answer was given in
}

// errNotFoundUnconfirmed is the cause when a keep-alive stream ended with
// "no such lease": no raft term to confirm it in.
var errNotFoundUnconfirmed = errors.New("keep-alive answered \"no such lease\" without a raft term to confirm it in")

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
	k.raftTerm = resp.GetHeader().GetRaftTerm()
	return max(time.Duration(resp.TTL)*time.Second, 0), nil
}

func (k *keepAliveStream) stop() {
	if k != nil {
		k.cancel()
	}
}
