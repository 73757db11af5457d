package gate

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Handler serves the board the way Kubernetes serves /readyz, so that a
// kubelet, a load balancer or curl can ask what startup still waits on:
//
//   - 200 and "ok" when every gate on the board is unlocked, else 503;
//
//   - ?verbose (or any 503) lists one line per gate, in board order, then a
//     verdict:
//
//     [+]controller-port ok
//     [-]upgrade-steps locked for 12s
//     [-]lease failed: no quorum
//     readyz check failed
//
//   - ?exclude=name (repeatable) leaves those gates out of the verdict
//     ("[+]name excluded: ok"); a name on no gate gets a "warn:" line;
//
//   - "Accept: application/json" returns the gates as JSON — name, state
//     (locked, unlocked, failed), since, for, opened order, error — with the
//     same status code.
//
// It never blocks: each request reads a Report.
func (b *Board) Handler() http.Handler { return readyz{b} }

type readyz struct{ b *Board }

func (h readyz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var query map[string][]string
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
	excluded := query["exclude"]
	report := h.b.Report()
	code := http.StatusOK
	for _, e := range report {
		if e.State != StateUnlocked && !slices.Contains(excluded, e.Name) {
			code = http.StatusServiceUnavailable
			break
		}
	}
	if acceptsJSON(r.Header.Values("Accept")) {
		serveJSON(w, code, report, excluded)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if _, verbose := query["verbose"]; !verbose && code == http.StatusOK {
		w.Write([]byte("ok"))
		return
	}
	// Like Kubernetes, a failing check is always verbose: a probe's log
	// then says which gate held it.
	w.Write(verboseText(report, excluded, code == http.StatusOK))
}

// verboseText is the ?verbose body: a line per gate, a warning naming
// excluded names that match no gate, and the verdict.
func verboseText(report Report, excluded []string, passed bool) []byte {
	buf := make([]byte, 0, 32*len(report)+32)
	matched := make([]bool, len(excluded))
	for _, e := range report {
		skip := false
		for i, name := range excluded {
			if name == e.Name {
				matched[i], skip = true, true
			}
		}
		if skip {
			buf = append(append(append(buf, "[+]"...), e.Name...), " excluded: ok\n"...)
			continue
		}
		switch e.State {
		case StateUnlocked:
			buf = append(append(append(buf, "[+]"...), e.Name...), " ok\n"...)
		case StateLocked:
			buf = append(append(append(buf, "[-]"...), e.Name...), " locked for "...)
			buf = append(append(buf, e.For.Round(time.Millisecond).String()...), '\n')
		default:
			buf = append(append(append(buf, "[-]"...), e.Name...), " failed: "...)
			buf = append(append(buf, causeOf(e.Err).Error()...), '\n')
		}
	}
	var unknown []string
	for i, name := range excluded {
		if !matched[i] && !slices.Contains(unknown, strconv.Quote(name)) {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	if len(unknown) > 0 {
		buf = append(buf, "warn: some health checks cannot be excluded: no matches for "...)
		buf = append(append(buf, strings.Join(unknown, ",")...), '\n')
	}
	if passed {
		return append(buf, "readyz check passed\n"...)
	}
	return append(buf, "readyz check failed\n"...)
}

// acceptsJSON reports whether an Accept header names application/json.
func acceptsJSON(accept []string) bool {
	for _, header := range accept {
		for _, part := range strings.Split(header, ",") {
			if mt, _, err := mime.ParseMediaType(part); err == nil && mt == "application/json" {
				return true
			}
		}
	}
	return false
}

// jsonEntry is an Entry on the wire.
type jsonEntry struct {
	Name  string    `json:"name"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	For   string    `json:"for"`
	Order int       `json:"order,omitempty"`
	Error string    `json:"error,omitempty"`
}

// serveJSON writes the gates not excluded as a JSON array.
func serveJSON(w http.ResponseWriter, code int, report Report, excluded []string) {
	out := make([]jsonEntry, 0, len(report))
	for _, e := range report {
		if slices.Contains(excluded, e.Name) {
			continue
		}
		j := jsonEntry{Name: e.Name, State: e.State.String(), Since: e.Since,
			For: e.For.Round(time.Millisecond).String(), Order: e.Order}
		if e.Err != nil {
			j.Error = causeOf(e.Err).Error()
		}
		out = append(out, j)
	}
	body, err := json.Marshal(out)
	if err != nil { // cannot happen: strings, ints and times only
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}
