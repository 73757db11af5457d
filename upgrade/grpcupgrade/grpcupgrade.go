package grpcupgrade

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coldstart-go/coldstart/internal/printable"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/internal/spread"
)

// The wire format of a refusal: a status is a refusal only if it carries an
// errdetails.ErrorInfo with Domain, one of the reasons and the metadata keys.
const (
	// Domain is the ErrorInfo domain of every refusal.
	Domain = "coldstart"
	// ReasonInProgress marks a refusal while an upgrade is in progress
	// (codes.Unavailable): the call was not executed; retry after the
	// RetryInfo delay.
	ReasonInProgress = "UPGRADE_IN_PROGRESS"
	// ReasonFailed marks a refusal after the upgrade failed
	// (codes.FailedPrecondition): the call was not executed; do not retry.
	ReasonFailed = "UPGRADE_FAILED"
	// MetadataPhase is the ErrorInfo metadata key of the server's phase.
	MetadataPhase = "phase"
	// MetadataCause is the ErrorInfo metadata key of a failed upgrade's
	// cause (its text alone, on one line, cut at 1 KiB).
	MetadataCause = "cause"
)

// metadataPeerReady is the ErrorInfo metadata key a drain refusal carries,
// "true", when a ready peer can serve (upgrade.GateConfig.PeerReady).
const metadataPeerReady = "peer_ready"

// pushbackKey is the trailer grpc-go's built-in retry reads (ms; < 0: stop).
const pushbackKey = "grpc-retry-pushback-ms"

// UnaryServerInterceptor guards unary calls with g, per call: a call is
// handled when the upgrade is complete or allow(info.FullMethod) reports
// true (allow may be nil; see AllowMethods). Any other call is refused
// BEFORE its handler runs, so it is safe to repeat:
//
//   - in progress: codes.Unavailable, an ErrorInfo{Reason:
//     UPGRADE_IN_PROGRESS, Domain: coldstart, Metadata: {phase}}, a
//     RetryInfo and the trailer grpc-retry-pushback-ms, both carrying a
//     wait drawn per refusal from [R, 2R] milliseconds (R is the gate's
//     RetryAfter); while the gate drains, the same, with the metadata
//     peer_ready: "true" when a ready peer can serve (pair it with a
//     health server set NOT_SERVING: the package example);
//   - failed: codes.FailedPrecondition, reason UPGRADE_FAILED (the cause in
//     its metadata and its message, cut at 1 KiB) and pushback -1, on
//     which grpc-go stops retrying.
//
// Each call is decided, and counted, by upgrade.Gate.Admit. It panics if g
// is nil.
func UnaryServerInterceptor(g *upgrade.Gate, allow func(fullMethod string) bool) grpc.UnaryServerInterceptor {
	if g == nil {
		panic("grpcupgrade.UnaryServerInterceptor: nil Gate")
	}
	var r refuser
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if guard := admit(g, allow, info.FullMethod); guard != nil {
			pushback, err := r.refuse(guard)
			_ = grpc.SetTrailer(ctx, metadata.MD{pushbackKey: {pushback}})
			return nil, err
		}
		resp, err := handler(ctx, req)
		return resp, executed(err)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: a refused
// stream ends before its handler runs, with the same status and trailer.
func StreamServerInterceptor(g *upgrade.Gate, allow func(fullMethod string) bool) grpc.StreamServerInterceptor {
	if g == nil {
		panic("grpcupgrade.StreamServerInterceptor: nil Gate")
	}
	var r refuser
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if guard := admit(g, allow, info.FullMethod); guard != nil {
			pushback, err := r.refuse(guard)
			ss.SetTrailer(metadata.MD{pushbackKey: {pushback}})
			return err
		}
		return executed(handler(srv, ss))
	}
}

// admit decides a call with g.Admit; allow is consulted only while g refuses.
func admit(g *upgrade.Gate, allow func(string) bool, fullMethod string) error {
	if g.Phase() == upgrade.PhaseComplete {
		return nil
	}
	return g.Admit(allow != nil && allow(fullMethod))
}

// executed is a handler's error as its client must see it: without our
// ErrorInfo, since the handler ran (upgrade/DESIGN.md, "grpcupgrade").
func executed(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || ourInfo(st) == nil {
		return err
	}
	return status.Error(st.Code(), st.Message())
}

// ourInfo returns st's ErrorInfo in our Domain, or nil.
func ourInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info
		}
	}
	return nil
}

// refuser builds one interceptor's refusals, sharing per gate guard what
// does not change per call (the status, its ErrorInfo).
type refuser struct {
	cached atomic.Pointer[stateRefusal]
}

// stateRefusal is the shared part of the refusals for one gate guard.
type stateRefusal struct {
	guard  error
	st     *status.Status // without the per-call RetryInfo
	lo, hi int64          // pushback range, ms; 0 once failed
}

func newStateRefusal(guard error) *stateRefusal {
	r := &stateRefusal{guard: guard}
	if ip, ok := guard.(*upgrade.InProgressError); ok {
		r.lo, r.hi = spread.Range(ip.RetryAfter(), time.Millisecond)
		// The message leaves the wait to RetryInfo: it differs per call.
		msg := (&upgrade.InProgressError{Phase: ip.Phase, PeerReady: ip.PeerReady}).Error()
		md := map[string]string{MetadataPhase: ip.Phase.String()}
		if ip.PeerReady {
			md[metadataPeerReady] = "true"
		}
		r.st = withInfo(codes.Unavailable, msg, ReasonInProgress, md)
		return r
	}
	md := map[string]string{MetadataPhase: upgrade.PhaseFailed.String()}
	msg := guard.Error()
	if cause := errors.Unwrap(guard); cause != nil {
		// On one line and cut at 1 KiB (upgrade/DESIGN.md, "grpcupgrade").
		shown := printable.Text(cause.Error())
		md[MetadataCause] = shown
		msg = (&upgrade.FailedError{Err: errors.New(shown)}).Error()
	}
	r.st = withInfo(codes.FailedPrecondition, msg, ReasonFailed, md)
	return r
}

func withInfo(c codes.Code, msg, reason string, md map[string]string) *status.Status {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md})
	if err != nil { // cannot happen: an ErrorInfo always marshals
		panic("grpcupgrade: encoding refusal: " + err.Error())
	}
	return st
}

// refuse returns the pushback for a call refused with guard (ms drawn from
// [R, 2R], or "-1" once failed) and the error to answer it with.
func (r *refuser) refuse(guard error) (pushback string, err error) {
	s := r.cached.Load()
	if s == nil || s.guard != guard { // a new gate state (racing builders build alike)
		s = newStateRefusal(guard)
		r.cached.Store(s)
	}
	if s.lo == 0 {
		return "-1", s.st.Err()
	}
	ms := spread.Draw(s.lo, s.hi)
	delay := time.Duration(math.MaxInt64) // beyond a Duration: saturate
	if ms <= math.MaxInt64/int64(time.Millisecond) {
		delay = time.Duration(ms) * time.Millisecond
	}
	st, werr := s.st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if werr != nil { // cannot happen: a RetryInfo always marshals
		panic("grpcupgrade: encoding refusal: " + werr.Error())
	}
	return strconv.FormatInt(ms, 10), st.Err()
}

// FromError turns a refusal status sent by the server interceptors back
// into an error in which errors.As finds an *upgrade.InProgressError (its
// RetryAfter the RetryInfo delay, at most an hour) or an
// *upgrade.FailedError (the server's text of the cause). Either still
// answers status.Code and status.FromError with the status it came as.
// Every other error, including a status without our ErrorInfo (which
// promises nothing about execution), is returned unchanged; nil stays nil.
func FromError(err error) error {
	st, ok := status.FromError(err)
	if !ok || st == nil || st.Code() == codes.OK {
		return err
	}
	info := ourInfo(st)
	if info == nil {
		return err
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if rd := ri.GetRetryDelay(); rd.IsValid() {
				delay = min(max(rd.AsDuration(), 0), spread.MaxWait)
			}
		}
	}
	switch info.GetReason() {
	case ReasonInProgress:
		var phase upgrade.Phase
		_ = phase.UnmarshalText([]byte(info.GetMetadata()[MetadataPhase])) // unknown: the zero Phase
		peer := info.GetMetadata()[metadataPeerReady] == "true"
		return &statusError{err: &upgrade.InProgressError{Phase: phase, RetryDelay: delay, PeerReady: peer}, st: st}
	case ReasonFailed:
		cause := cmp.Or(printable.Text(strings.TrimSpace(info.GetMetadata()[MetadataCause])), "the server gave no cause")
		return &statusError{err: &upgrade.FailedError{Err: errors.New(cause)}, st: st}
	}
	return err
}

// statusError is an upgrade error that still carries its gRPC status.
type statusError struct {
	err error
	st  *status.Status
}

func (e *statusError) Error() string              { return e.err.Error() }
func (e *statusError) Unwrap() error              { return e.err }
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// UnaryClientInterceptor retries calls refused while the server upgrades,
// with upgrade.Retry: it waits exactly the server's RetryInfo delay, has no
// attempt cap and stops when ctx ends, at once on a failed upgrade, and on
// any other error. It returns FromError's error, which still answers
// status.Code: a refusal's code, or codes.Canceled / codes.DeadlineExceeded
// when ctx ended while it waited (the error then also matches the context
// error and the last refusal). opts are upgrade.Retry's. Only refused calls
// are retried.
func UnaryClientInterceptor(opts ...upgrade.RetryOption) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		return ended(upgrade.Retry(ctx, func(ctx context.Context) error {
			return FromError(invoker(ctx, method, req, reply, cc, callOpts...))
		}, opts...))
	}
}

// ended gives Retry's own "stopped" errors the status of how the call ended.
func ended(err error) error {
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return &statusError{err: err, st: status.FromContextError(err)}
	}
	return err
}

// Bounds of what an uncommitted stream keeps (see StreamClientInterceptor).
const (
	maxReplay      = 64
	maxReplayBytes = 4 << 20
)

// StreamClientInterceptor is UnaryClientInterceptor for streams. A refused
// stream is opened again after exactly the server's delay, and what the
// client had sent on it sent again, until the stream is admitted, the
// upgrade fails, or its ctx ends — all inside the client's first RecvMsg
// (Recv or CloseAndRecv), which returns the admitted stream's first
// message. Once a message has been received the stream is committed and
// never retried.
//
// While a stream is not yet committed, SendMsg keeps each message (not
// copied) and reports a stream the server ended as sent (nil, not
// io.EOF): the status comes from RecvMsg, which retries a refusal and
// resends them. A message sent while RecvMsg waits goes to the reopened
// stream, so a bidi stream may send and receive from two goroutines.
//
// Cost: an uncommitted stream holds on to up to 64 messages and 4 MiB of
// them (proto.Size). A stream that sends more than that first, or a
// message that is not a proto.Message, is committed at that message: it is
// no longer retried. Header and Context are the current attempt's. Every
// error RecvMsg returns is FromError's; opts are upgrade.Retry's.
func StreamClientInterceptor(opts ...upgrade.RetryOption) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		s := &retryStream{ctx: ctx, opts: opts, open: func(ctx context.Context) (grpc.ClientStream, error) {
			return streamer(ctx, desc, cc, method, callOpts...)
		}}
		err := ended(upgrade.Retry(ctx, func(ctx context.Context) error {
			cs, err := s.open(ctx)
			s.cs = cs
			return FromError(err)
		}, opts...))
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// retryStream is a client stream reopened while refused, until committed.
type retryStream struct {
	ctx  context.Context
	opts []upgrade.RetryOption
	open func(context.Context) (grpc.ClientStream, error)

	// mu guards the fields below, and is held while a stream is reopened
	// and given what was sent; never across a wait or a RecvMsg.
	mu        sync.Mutex
	cs        grpc.ClientStream // the current attempt
	sent      []any             // messages sent while not committed
	sentBytes int               // their proto.Size
	closed    bool              // CloseSend was called while not committed
	committed bool
}

func (s *retryStream) current() grpc.ClientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs
}

func (s *retryStream) Header() (metadata.MD, error) { return s.current().Header() }
func (s *retryStream) Trailer() metadata.MD         { return s.current().Trailer() }
func (s *retryStream) Context() context.Context     { return s.current().Context() }

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	s.closed = !s.committed
	cs := s.cs
	s.mu.Unlock()
	return cs.CloseSend()
}

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.committed {
		s.keep(m)
	}
	cs, committed := s.cs, s.committed
	s.mu.Unlock()
	err := cs.SendMsg(m)
	if err == io.EOF && !committed {
		return nil // the server ended the stream: RecvMsg learns why, and may resend m
	}
	return err
}

// keep adds m to what is replayed, or commits the stream; s.mu is held.
func (s *retryStream) keep(m any) {
	pm, ok := m.(proto.Message)
	if !ok || len(s.sent) >= maxReplay {
		s.commit()
		return
	}
	n := proto.Size(pm)
	if s.sentBytes+n > maxReplayBytes {
		s.commit()
		return
	}
	s.sent, s.sentBytes = append(s.sent, m), s.sentBytes+n
}

// commit ends the stream's retries; s.mu is held.
func (s *retryStream) commit() {
	s.committed, s.sent, s.sentBytes = true, nil, 0
}

func (s *retryStream) RecvMsg(m any) error {
	s.mu.Lock()
	cs, committed := s.cs, s.committed
	s.mu.Unlock()
	err := FromError(cs.RecvMsg(m))
	if committed {
		return err
	}
	s.mu.Lock()
	if err == nil || !errors.Is(err, upgrade.ErrUpgradeInProgress) || s.committed {
		s.commit()
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	refusal, last := err, err
	err = upgrade.Retry(s.ctx, func(ctx context.Context) error {
		if refusal != nil { // the refusal in hand: wait it out first
			err, refusal = refusal, nil
			return err
		}
		again, err := s.reopen(ctx)
		if err == nil {
			err = again.RecvMsg(m) // without s.mu
		}
		if err := FromError(err); err != errCommitted {
			last = err
			return err
		}
		return errCommitted
	}, s.opts...)
	s.mu.Lock()
	s.commit()
	s.mu.Unlock()
	if err == errCommitted {
		return last // committed by a SendMsg during the wait: what was sent is gone
	}
	return ended(err)
}

// errCommitted stops RecvMsg's retries when a SendMsg committed the stream.
var errCommitted = errors.New("grpcupgrade: stream committed during the wait")

// reopen opens the stream again, swaps it in and resends what was sent,
// under s.mu (upgrade/DESIGN.md, "grpcupgrade").
func (s *retryStream) reopen(ctx context.Context) (grpc.ClientStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed {
		return nil, errCommitted
	}
	cs, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.cs = cs
	for _, sent := range s.sent {
		if err := cs.SendMsg(sent); err == io.EOF {
			return cs, nil // ended by the server: RecvMsg says why
		} else if err != nil {
			return nil, err
		}
	}
	if s.closed {
		_ = cs.CloseSend()
	}
	return cs, nil
}

// AllowMethods returns an allow func for the server interceptors that
// allows exactly the given full methods ("/package.Service/Method", as in
// grpc.UnaryServerInfo.FullMethod and the generated _FullMethodName
// constants). It panics on a name not of that form.
func AllowMethods(fullMethods ...string) func(fullMethod string) bool {
	set := make(map[string]struct{}, len(fullMethods))
	for _, m := range fullMethods {
		svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		if !strings.HasPrefix(m, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/") {
			panic(fmt.Sprintf("grpcupgrade.AllowMethods: %q is not a full method name (want /package.Service/Method)", m))
		}
		set[m] = struct{}{}
	}
	return func(fullMethod string) bool {
		_, ok := set[fullMethod]
		return ok
	}
}
