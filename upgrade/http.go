package upgrade

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/internal/printable"
	"github.com/coldstart-go/coldstart/upgrade/internal/spread"
)

// Wire codes, sent in the JSON body's "code" and in the Coldstart-Upgrade
// header of every refusal.
const (
	// Code marks a refusal because an upgrade is in progress (status 503):
	// the request was not executed; retry after the Retry-After header.
	Code = "upgrade-in-progress"
	// CodeFailed marks a refusal because the upgrade failed (status 409, no
	// Retry-After): the request was not executed; stop and show it.
	CodeFailed = "upgrade-failed"
)

// headerCode carries Code or CodeFailed on every refusal, body or none.
const headerCode = "Coldstart-Upgrade"

// statusFailed answers a request refused after a failed upgrade (DESIGN.md,
// "409 for a failed upgrade").
const statusFailed = http.StatusConflict

// maxWireBody bounds how much of a refusal's body ErrorFromResponse reads.
const maxWireBody = 4 << 10

// wireBody is the JSON body of a refusal. Cause, sent only once the upgrade
// failed, is the cause's text alone.
type wireBody struct {
	Code    string `json:"code"`
	Phase   string `json:"phase"`
	Message string `json:"message"`
	Cause   string `json:"cause,omitempty"`
	// PeerReady, sent only while draining: a ready peer can serve.
	PeerReady bool `json:"peer_ready,omitempty"`
}

// maxRetryAfters bounds the Retry-After values a refusal precomputes.
const maxRetryAfters = 128

// refusal is a precomputed HTTP answer, shared by every request refused in
// one gate state.
type refusal struct {
	status int
	code   string
	// Retry-After is drawn from [lo, hi] seconds; after[i] is lo+i unless
	// the range is wide. Once failed, lo is 0: no Retry-After.
	lo, hi int64
	after  []string
	body   []byte
	// close asks the client to go (a draining server): Connection: close,
	// which net/http's server obeys on HTTP/1.1 and turns into a GOAWAY
	// on HTTP/2.
	close bool
}

func newRefusal(guard error) *refusal {
	r := &refusal{}
	if ip, ok := guard.(*InProgressError); ok {
		r.status, r.code = http.StatusServiceUnavailable, Code
		r.lo, r.hi = spread.Range(ip.RetryDelay, time.Second)
		if r.hi-r.lo < maxRetryAfters {
			for s := r.lo; s <= r.hi; s++ {
				r.after = append(r.after, strconv.FormatInt(s, 10))
			}
		}
		// The message leaves the wait to the header: it differs per refusal.
		msg := (&InProgressError{Phase: ip.Phase, PeerReady: ip.PeerReady}).Error()
		r.body = encodeRefusal(wireBody{Code: Code, Phase: ip.Phase.String(), Message: msg, PeerReady: ip.PeerReady})
		r.close = ip.Phase == PhaseDraining
	} else {
		r.status, r.code = statusFailed, CodeFailed
		r.body = failedBody(guard)
	}
	return r
}

func encodeRefusal(b wireBody) []byte {
	body, err := json.Marshal(b)
	if err != nil { // cannot happen: four strings
		panic("upgrade: encoding refusal: " + err.Error())
	}
	return append(body, '\n')
}

// failedBody is the body of a refusal after a failed upgrade: its cause on
// one line, cut to fit maxWireBody (DESIGN.md, "The failed body's cause is
// cut").
func failedBody(guard error) []byte {
	b := wireBody{Code: CodeFailed, Phase: PhaseFailed.String(), Message: guard.Error()}
	cause := errors.Unwrap(guard)
	if cause == nil {
		return encodeRefusal(b)
	}
	shown := printable.Text(cause.Error())
	for {
		b.Cause, b.Message = shown, (&FailedError{Err: remoteError(shown)}).Error()
		body := encodeRefusal(b)
		if len(body) <= maxWireBody || len(shown) <= len(printable.Ellipsis) {
			return body
		}
		shown = printable.String(shown, max(len(shown)/2, len(printable.Ellipsis)))
	}
}

func (r *refusal) retryAfter() string {
	s := spread.Draw(r.lo, r.hi)
	if r.after != nil {
		return r.after[s-r.lo]
	}
	return strconv.FormatInt(s, 10)
}

// write sends the refusal. Header values share one allocation.
func (r *refusal) write(w http.ResponseWriter) {
	h := w.Header()
	vals := make([]string, 5)
	vals[0], vals[1], vals[2], vals[4] = "application/json", "no-store", r.code, "close"
	h["Content-Type"] = vals[0:1:1]
	h["Cache-Control"] = vals[1:2:2]
	h[headerCode] = vals[2:3:3]
	if r.lo > 0 {
		vals[3] = r.retryAfter()
		h["Retry-After"] = vals[3:4:4]
	} else {
		delete(h, "Retry-After")
	}
	delete(h, "Content-Length")
	if r.close {
		h["Connection"] = vals[4:5:5]
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

// Middleware guards an HTTP handler with g. A request is served when the
// upgrade is complete or allow(r) reports true; allow may be nil (nothing
// is allowlisted) and is consulted only while the gate refuses. Every other
// request is refused, never reaching next:
//
//   - while the upgrade is in progress, with 503 Service Unavailable and a
//     Retry-After in whole seconds drawn per refusal from [R, 2R] (R is
//     the gate's RetryAfter rounded up, at least 1; see SetRetryAfter);
//     while draining, the same and Connection: close, on which net/http's
//     server closes an HTTP/1.1 connection after the response and sends
//     an HTTP/2 one a GOAWAY, and "peer_ready": true in the body when a
//     ready peer can serve (GateConfig.PeerReady);
//   - once it failed, with 409 Conflict and no Retry-After;
//
// both with the header Coldstart-Upgrade: <code> and a JSON body
// {"code", "phase", "message"} (plus "cause" once failed: the cause's text
// on one line, control characters replaced, cut at 1 KiB). Each request
// is decided, and counted, as Admit decides it.
//
// A refused request never reaches next, so a client may repeat it safely.
// The gate is read once, when the request arrives: a request admitted
// before Enter re-closes the gate runs to completion (drain in-flight
// requests yourself if steps need a quiet server). It panics if g is nil.
func Middleware(g *Gate, allow func(*http.Request) bool) func(http.Handler) http.Handler {
	if g == nil {
		panic("upgrade.Middleware: nil Gate")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := g.st.Load()
			if s.refusal == nil || s.admit(allow != nil && allow(r)) == nil {
				next.ServeHTTP(w, r)
				return
			}
			s.refusal.write(w)
		})
	}
}

var readyBody = []byte(`{"phase":"complete"}` + "\n")

// ReadyHandler answers readiness probes: 200 with {"phase":"complete"} once
// the upgrade is complete, otherwise the same refusal Middleware sends (so
// ErrorFromResponse and WaitReady understand it). It needs no allowlist
// entry: mounted behind Middleware it answers identically.
func ReadyHandler(g *Gate) http.Handler {
	if g == nil {
		panic("upgrade.ReadyHandler: nil Gate")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := g.st.Load()
		if s.refusal != nil {
			s.refusal.write(w)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(readyBody)
	})
}

// ErrorFromResponse turns a refusal sent by Middleware or ReadyHandler back
// into an error: an *InProgressError (matching ErrUpgradeInProgress) or a
// *FailedError (matching ErrUpgradeFailed, its Err carrying the server's
// text of the cause). It returns nil for anything else, including nil resp:
//
//   - Only a 503 or a 409 can be a refusal; another status's body is not
//     touched. A 503 may carry Code or CodeFailed (a round-1 server's),
//     a 409 only CodeFailed.
//   - Such a response is this gate's refusal only if it carries the
//     Coldstart-Upgrade header or a JSON body whose "code" is one of ours;
//     the header wins if both are present. A bare 503 from a proxy, or a
//     409 from some other handler, is NOT a refusal (nothing promises its
//     request was not executed): handle it as any other HTTP error.
//   - A malformed or missing body (HEAD, truncated) with a valid header
//     still yields the refusal, with a zero Phase.
//   - Retry-After is read as whole seconds, or as an HTTP-date relative to
//     the response's Date header; missing, negative or unparsable values
//     give a zero RetryDelay (no hint: Retry uses its own backoff), and a
//     wait longer than an hour is read as an hour.
//
// It reads at most 4 KiB of the body of a 503 or 409 and puts them back in
// resp.Body, which the caller can still read whole and must still close.
func ErrorFromResponse(resp *http.Response) error {
	if resp == nil || (resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != statusFailed) {
		return nil
	}
	code := strings.TrimSpace(resp.Header.Get(headerCode))
	if code != "" && !isCode(code, resp.StatusCode) {
		return nil
	}
	var body wireBody
	if resp.Body != nil && resp.Body != http.NoBody && (code != "" || isJSON(resp.Header.Get("Content-Type"))) {
		buf := peekBody(resp)
		_ = json.Unmarshal(buf, &body) // malformed: fields stay empty
	}
	if code == "" && isCode(body.Code, resp.StatusCode) {
		code = body.Code
	}
	switch code {
	case Code:
		return &InProgressError{Phase: parsePhase(body.Phase), RetryDelay: parseRetryAfter(resp.Header), PeerReady: body.PeerReady}
	case CodeFailed:
		cause := cmp.Or(strings.TrimSpace(body.Cause), causeInMessage(body.Message), "the server gave no cause")
		return &FailedError{Err: remoteError(cause)}
	}
	return nil
}

// causeInMessage is the cause inside a FailedError's text, for a server
// that sent no separate cause (round 1's).
func causeInMessage(msg string) string {
	msg = strings.TrimSpace(msg)
	for {
		cut := strings.TrimSuffix(strings.TrimPrefix(msg, "upgrade failed: "), "; call not executed")
		if cut == msg {
			return msg
		}
		msg = cut
	}
}

func isCode(code string, status int) bool {
	return code == CodeFailed || (code == Code && status == http.StatusServiceUnavailable)
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// peekBody reads up to maxWireBody bytes of resp.Body and puts them back.
func peekBody(resp *http.Response) []byte {
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxWireBody))
	resp.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), errReader{resp.Body, err}), Closer: resp.Body}
	return buf
}

type replayBody struct {
	io.Reader
	io.Closer
}

// errReader continues with r, or reports the error that stopped the peek.
type errReader struct {
	r   io.Reader
	err error
}

func (e errReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return e.r.Read(p)
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP-date
// (relative to Date), at most spread.MaxWait; 0 for no usable hint.
func parseRetryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" { // delay-seconds = 1*DIGIT (RFC 9110, 10.2.3), however many
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(spread.MaxWait/time.Second) { // err: beyond uint64, so longer still
			return spread.MaxWait
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return 0
	}
	return min(max(at.Sub(date), 0), spread.MaxWait)
}
