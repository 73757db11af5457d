package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Wire codes, sent in the JSON body's "code" and in the HeaderCode header of
// every refusal.
const (
	// Code marks a refusal because an upgrade is in progress: the request
	// was not executed; retry after the Retry-After header.
	Code = "upgrade-in-progress"
	// CodeFailed marks a refusal because the upgrade failed: the request
	// was not executed and there is no Retry-After; stop and show it.
	CodeFailed = "upgrade-failed"
)

// HeaderCode is the response header carrying Code or CodeFailed on every
// refusal, so a client recognises one without reading the body (a HEAD
// request has none).
const HeaderCode = "Coldstart-Upgrade"

// maxWireBody bounds how much of a 503 body ErrorFromResponse reads. Our
// refusals are ~200 bytes; a proxy's error page may be large.
const maxWireBody = 4 << 10

// wireBody is the JSON body of a refusal.
type wireBody struct {
	Code    string `json:"code"`
	Phase   string `json:"phase"`
	Message string `json:"message"`
}

// refusal is a precomputed HTTP answer, shared by every request refused in
// one gate state.
type refusal struct {
	code       string
	retryAfter string // "" when failed: clients must not retry
	body       []byte
}

func newRefusal(guard error) *refusal {
	r := &refusal{}
	var b wireBody
	var ip *InProgressError
	if errors.As(guard, &ip) {
		r.code = Code
		r.retryAfter = strconv.FormatInt(retryAfterSeconds(ip.RetryAfter), 10)
		b = wireBody{Code: Code, Phase: ip.Phase.String(), Message: ip.Error()}
	} else {
		r.code = CodeFailed
		b = wireBody{Code: CodeFailed, Phase: Failed.String(), Message: guard.Error()}
	}
	body, err := json.Marshal(b)
	if err != nil { // cannot happen: three strings
		panic("upgrade: encoding refusal: " + err.Error())
	}
	r.body = append(body, '\n')
	return r
}

// retryAfterSeconds rounds d up to whole seconds, at least 1: Retry-After
// has no finer unit, and "0" would invite an immediate stampede.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if d > math.MaxInt64-time.Second { // overflow in the rounding
		s = int64(d / time.Second)
	}
	return max(s, 1)
}

// write sends the refusal: 503, Retry-After (unless failed), HeaderCode,
// and the JSON body. Header values share one allocation.
func (r *refusal) write(w http.ResponseWriter) {
	h := w.Header()
	vals := make([]string, 4)
	vals[0], vals[1], vals[2], vals[3] = "application/json", "no-store", r.code, r.retryAfter
	h["Content-Type"] = vals[0:1:1]
	h["Cache-Control"] = vals[1:2:2]
	h[HeaderCode] = vals[2:3:3]
	if r.retryAfter != "" {
		h["Retry-After"] = vals[3:4:4]
	} else {
		delete(h, "Retry-After")
	}
	delete(h, "Content-Length")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(r.body)
}

// Middleware guards an HTTP handler with g. A request is served when the
// upgrade is complete or allow(r) reports true; allow may be nil (nothing
// is allowlisted) and is consulted only while the gate refuses. Every other
// request is refused with 503, a Retry-After header in whole seconds (at
// least 1; none once the upgrade failed), the HeaderCode header, and a JSON
// body {"code", "phase", "message"}. A refusal is precomputed per gate
// state and costs one small allocation.
//
// The not-executed promise: a refused request never reaches next, so a
// client may repeat it safely. The gate is read once, when the request
// arrives; a request admitted before Enter re-closes the gate runs to
// completion (drain in-flight requests yourself if steps need a quiet
// server). Middleware panics if g is nil.
func Middleware(g *Gate, allow func(*http.Request) bool) func(http.Handler) http.Handler {
	if g == nil {
		panic("upgrade.Middleware: nil Gate")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := g.st.Load()
			if s.refusal == nil || (allow != nil && allow(r)) {
				next.ServeHTTP(w, r)
				return
			}
			s.refusal.write(w)
		})
	}
}

// readyBody is ReadyHandler's answer once the upgrade is complete.
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
// *FailedError (matching ErrUpgradeFailed, its Cause carrying the server's
// message). It returns nil for anything else, including nil resp:
//
//   - A status other than 503 is never a refusal; its body is not touched.
//   - A 503 is this gate's refusal only if it carries the HeaderCode header
//     or a JSON body whose "code" is Code or CodeFailed; the header wins if
//     both are present. A 503 from a proxy or load balancer is NOT treated
//     as a refusal, because nothing promises that its request was not
//     executed: handle it as any other HTTP error.
//   - A malformed or missing body (HEAD, truncated) with a valid header
//     still yields the refusal, with a zero Phase.
//   - Retry-After is read as whole seconds, or as an HTTP-date relative to
//     the response's Date header; missing, negative or unparsable values
//     give a zero RetryAfter (no hint: Retry uses its own backoff).
//
// ErrorFromResponse reads at most 4 KiB of a 503 body and then replaces
// resp.Body with a reader that replays those bytes before the rest, so the
// caller can still read the whole body and must still close it.
func ErrorFromResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		return nil
	}
	code := strings.TrimSpace(resp.Header.Get(HeaderCode))
	if code != "" && code != Code && code != CodeFailed {
		return nil
	}
	var body wireBody
	if resp.Body != nil && resp.Body != http.NoBody && (code != "" || isJSON(resp.Header.Get("Content-Type"))) {
		buf := peekBody(resp)
		_ = json.Unmarshal(buf, &body) // malformed: fields stay empty
	}
	if code == "" {
		code = body.Code
	}
	switch code {
	case Code:
		return &InProgressError{Phase: parsePhase(body.Phase), RetryAfter: parseRetryAfter(resp.Header)}
	case CodeFailed:
		msg := strings.TrimSpace(body.Message)
		if msg == "" {
			msg = "the server gave no cause"
		}
		return &FailedError{Cause: remoteError(msg)}
	}
	return nil
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// peekBody reads up to maxWireBody bytes of resp.Body and puts them back in
// front of the rest.
func peekBody(resp *http.Response) []byte {
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxWireBody))
	resp.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), errReader{resp.Body, err}), Closer: resp.Body}
	return buf
}

// replayBody is a response body whose first bytes were already read.
type replayBody struct {
	io.Reader
	io.Closer
}

// errReader continues with r, or reports the error that stopped the peek so
// the caller sees it where it happened.
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
// (relative to Date, the only clock the response offers).
func parseRetryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64)
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
	return max(at.Sub(date), 0)
}
