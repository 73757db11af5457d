package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
)

// RetryTransport returns an http.RoundTripper that waits upgrades out: it
// sends each request through next (nil means http.DefaultTransport) and,
// while the server refuses it because an upgrade is in progress, waits as
// Retry does and sends it again. Nothing else is resent:
//
//   - A request with a body is resent only with a fresh body from
//     req.GetBody (set by http.NewRequest for bytes, strings and
//     bytes.Reader bodies). A request that cannot be replayed gets its
//     refusal back as the response, unread, for the caller to decode.
//   - A failed upgrade's refusal (409, ErrUpgradeFailed), any other
//     response and any transport error are returned as they came, but
//     one: once the server has refused the request while draining (it
//     is restarting), a connection refused, which sent nothing, is
//     waited out with the backoff too, until the server is back.
//   - When the request's context ends while it waits, or the server's wait
//     outlasts its deadline, RoundTrip returns Retry's error, which
//     matches both the context's error and ErrUpgradeInProgress (through
//     the *url.Error http.Client wraps it in).
//
// Each refusal's body is drained and closed before the wait. opts are
// Retry's; WithRetryIf has no effect (only refusals were not executed).
func RetryTransport(next http.RoundTripper, opts ...RetryOption) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	c, err := newRetryConfig(opts)
	c.retryIf = func(err error) bool {
		var nr *notReadyError
		return isInProgress(err) || errors.As(err, &nr)
	}
	return &retryTransport{next: next, c: c, err: err}
}

type retryTransport struct {
	next http.RoundTripper
	c    retryConfig
	err  error // an invalid option: every RoundTrip returns it
}

func isInProgress(err error) bool { return errors.Is(err, ErrUpgradeInProgress) }

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.err != nil {
		closeBody(req)
		return nil, t.err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	var (
		resp    *http.Response
		rtErr   error
		sent    bool
		drained bool // a refusal said the server is draining: it restarts
	)
	err := t.c.run(req.Context(), func(context.Context) error {
		attempt := req
		if sent { // every attempt after the first needs its own body
			if attempt, rtErr = rewind(req); rtErr != nil {
				return nil
			}
		}
		sent = true
		resp, rtErr = t.next.RoundTrip(attempt)
		if rtErr != nil && drained && req.Context().Err() == nil && errors.Is(rtErr, syscall.ECONNREFUSED) {
			return &notReadyError{cause: rtErr}
		}
		if rtErr != nil || !replayable {
			return nil
		}
		refusal := ErrorFromResponse(resp)
		var ip *InProgressError
		if !errors.As(refusal, &ip) {
			return nil
		}
		drained = drained || ip.Phase == PhaseDraining
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWireBody))
		_ = resp.Body.Close()
		resp = nil
		return refusal
	})
	if err != nil { // ctx ended: while waiting (the last refusal is closed) or before the first send
		if !sent {
			closeBody(req)
		}
		return nil, err
	}
	return resp, rtErr
}

// rewind returns req with a fresh body from GetBody.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("upgrade: cannot resend %s %s after a refusal: GetBody: %w", req.Method, req.URL.Redacted(), err)
	}
	again := *req // as net/http rewinds a body: a shallow copy, a new Body
	again.Body = body
	return &again, nil
}

// closeBody closes a request's body, which a RoundTripper must do even
// when it fails.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
