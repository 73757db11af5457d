package boardview

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/gate"
)

// ReadyHandler serves b the way Kubernetes serves /readyz, so that a
// kubelet, a load balancer or curl can ask what startup still waits on:
//
//   - 200 and "ok" when every gate on the board is unlocked, else 503 (a
//     draining board, gate.BoardConfig.Drain, from the drain's start on:
//     "[-]draining locked for 3s");
//
//   - ?verbose (or any 503) lists one line per gate, in board order, then a
//     verdict (below);
//
//   - ?exclude=name (repeatable) leaves those gates out of the verdict
//     ("[+]name excluded: ok"); a name on no gate gets a "warn:" line;
//
//   - "Accept: application/json" returns the gates as JSON — name, state
//     (locked, unlocked, failed), since, for, opened order, detail, error —
//     with the same status code.
//
// A verbose answer:
//
//	[+]controller-port ok
//	[-]upgrade locked for 12s (running upgrade steps)
//	[-]lease failed: no quorum
//	readyz check failed
//
// It never blocks: each request reads a Report.
func ReadyHandler(b *gate.Board) http.Handler { return readyz{b} }

type readyz struct{ b *gate.Board }

func (h readyz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var query map[string][]string
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
	excluded := query["exclude"]
	report := h.b.Report()
	code := http.StatusOK
	for _, e := range report {
		if e.State != gate.StateUnlocked && !slices.Contains(excluded, e.Name) {
			code = http.StatusServiceUnavailable
			break
		}
	}
	if acceptable(r.Header.Values("Accept"), "application/json", "text/plain") == "application/json" {
		serveJSON(w, code, report, excluded)
		return
	}
	if _, verbose := query["verbose"]; !verbose && code == http.StatusOK {
		plain(w, code, "ok")
		return
	}
	// Like Kubernetes, a failing check is always verbose: a probe's log
	// then says which gate held it.
	plain(w, code, verboseText(report, excluded, code == http.StatusOK))
}

// verboseText is the ?verbose body: a line per gate (shown), a warning
// naming exclusions that match no gate's own name, and the verdict.
func verboseText(report gate.Report, excluded []string, passed bool) string {
	shown := shownReport(report)
	var buf strings.Builder
	buf.Grow(40*len(report) + 24)
	line := func(parts ...string) {
		for _, p := range parts {
			buf.WriteString(p)
		}
		buf.WriteByte('\n')
	}
	matched := make([]bool, len(excluded))
	isExcluded := func(name string) bool {
		hit := false
		for i, x := range excluded {
			if x == name {
				matched[i], hit = true, true
			}
		}
		return hit
	}
	for i, e := range shown {
		switch {
		case isExcluded(report[i].Name):
			line("[+]", e.Name, " excluded: ok")
		case e.State == gate.StateUnlocked:
			line("[+]", e.Name, " ok")
		case e.State == gate.StateLocked && e.Detail != "":
			line("[-]", e.Name, " locked for ", e.For.Round(time.Millisecond).String(), " (", e.Detail, ")")
		case e.State == gate.StateLocked:
			line("[-]", e.Name, " locked for ", e.For.Round(time.Millisecond).String())
		default:
			line("[-]", e.Name, " failed: ", cause(e.Err).Error())
		}
	}
	var unknown []string
	for i, name := range excluded {
		if q := shownQuery(name); !matched[i] && !slices.Contains(unknown, q) {
			unknown = append(unknown, q)
		}
	}
	if len(unknown) > 0 {
		line("warn: some health checks cannot be excluded: no matches for ", strings.Join(unknown, ","))
	}
	if passed {
		line("readyz check passed")
	} else {
		line("readyz check failed")
	}
	return buf.String()
}

// acceptable returns the media type of an Accept header that is one of
// types with the highest weight (q, 1 if absent; the first named of equal
// weights), other than with q=0 ("not acceptable", RFC 9110 12.4.2); ""
// if none is.
func acceptable(accept []string, types ...string) string {
	best, bestQ := "", 0.0
	for _, header := range accept {
		for _, part := range strings.Split(header, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || !slices.Contains(types, mt) {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(v, 64); err != nil || q < 0 || q > 1 {
					continue
				}
			}
			if q > bestQ {
				best, bestQ = mt, q
			}
		}
	}
	return best
}

// jsonEntry is an Entry on the wire.
type jsonEntry struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Since  string `json:"since"` // RFC 3339
	For    string `json:"for"`
	Order  int    `json:"order,omitempty"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// serveJSON writes the gates not excluded as a JSON array, shown as
// shownReport shows them.
func serveJSON(w http.ResponseWriter, code int, report gate.Report, excluded []string) {
	out := make([]jsonEntry, 0, len(report))
	for i, e := range shownReport(report) {
		if slices.Contains(excluded, report[i].Name) {
			continue
		}
		j := jsonEntry{Name: e.Name, State: e.State.String(), Since: e.Since.Format(time.RFC3339Nano),
			For: e.For.Round(time.Millisecond).String(), Order: e.Order, Detail: e.Detail, Error: errText(e.Err)}
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
