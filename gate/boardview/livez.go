package boardview

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/coldstart-go/coldstart/internal/printable"
)

// LiveHandler serves the checks the way Kubernetes serves /livez: 200 and
// "ok" when every check returns nil, else 500 and one line per check, in
// name order, then "livez check failed" (?verbose lists them on a 200
// too). A check (lease.Tracker's Alive) fails only when a restart would
// fix its component, and must not block: each request calls every check.
//
//	http.Handle("/livez", boardview.LiveHandler(map[string]func() error{"lease": tr.Alive}))
func LiveHandler(checks map[string]func() error) http.Handler {
	names := slices.Sorted(maps.Keys(checks))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		code := http.StatusOK
		for _, name := range names {
			if err := checks[name](); err != nil {
				code = http.StatusInternalServerError
				b.WriteString("[-]" + printable.Name(name) + " failed: " + printable.Text(err.Error()) + "\n")
			} else {
				b.WriteString("[+]" + printable.Name(name) + " ok\n")
			}
		}
		switch _, verbose := r.URL.Query()["verbose"]; {
		case code == http.StatusOK && !verbose:
			b.Reset()
			b.WriteString("ok")
		case code == http.StatusOK:
			b.WriteString("livez check passed\n")
		default:
			b.WriteString("livez check failed\n")
		}
		plain(w, code, b.String())
	})
}
