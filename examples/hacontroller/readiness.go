package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// readyzAnswer is one answer of a controller's /readyz?verbose, read over
// HTTP from its controller port.
type readyzAnswer struct {
	who  string // the controller probed
	url  string
	code int
	body string
	err  error // the request itself failed
}

// baseURL is controller c's controller port.
func baseURL(c *controller) string { return "http://" + c.ctrlAddr }

// readinessURL is where controller c serves its board.
func readinessURL(c *controller) string { return baseURL(c) + "/readyz" }

// probeReadyz asks c's controller port for /readyz?verbose, on a fresh
// connection that it closes.
func probeReadyz(ctx context.Context, c *controller) readyzAnswer {
	a := readyzAnswer{who: c.name, url: readinessURL(c) + "?verbose"}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
	if err != nil {
		a.err = err
		return a
	}
	resp, err := client.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	a.code, a.body, a.err = resp.StatusCode, string(body), err
	return a
}

// problem says how a is not the answer it should be: while the controller
// is starting, 503 with a "[-]" line for what it waits on and "readyz check
// failed"; once it is stable, 200 with "readyz check passed" and no "[-]".
// It returns "" if a is right.
func (a readyzAnswer) problem(wantReady bool) string {
	switch {
	case a.err != nil:
		return fmt.Sprintf("GET %s: %v", a.url, a.err)
	case wantReady && (a.code != http.StatusOK || !strings.HasSuffix(a.body, "readyz check passed\n") || strings.Contains(a.body, "[-]")):
		return fmt.Sprintf("%s answered %d, not 200 %q, once stable: %q", a.who, a.code, "readyz check passed", a.body)
	case !wantReady && (a.code != http.StatusServiceUnavailable || !strings.HasSuffix(a.body, "readyz check failed\n") || !strings.Contains(a.body, "[-]")):
		return fmt.Sprintf("%s answered %d, not 503 with [-] lines, while starting: %q", a.who, a.code, a.body)
	}
	return ""
}

// String shows a as a timeline message: the request, the status, and the
// body indented under it.
func (a readyzAnswer) String() string {
	if a.err != nil {
		return fmt.Sprintf("GET %s: %v", a.url, a.err)
	}
	indent := "\n" + strings.Repeat(" ", 20)
	return fmt.Sprintf("GET %s -> %d %s%s%s", a.url, a.code, http.StatusText(a.code),
		indent, strings.ReplaceAll(strings.TrimSuffix(a.body, "\n"), "\n", indent))
}

// probeWhileStarting probes the first controller once its own calls have
// been refused during the upgrade, then lets its upgrade complete (release
// is its upgradeHold): the answer is taken before it is stable in every
// run, while it shows what the controller already has and what it still
// waits on.
func probeWhileStarting(ctx context.Context, tl *timeline, c *controller, release func()) readyzAnswer {
	defer release()
	if !c.allRefused(ctx) {
		return readyzAnswer{who: c.name, url: readinessURL(c) + "?verbose", err: ctx.Err()}
	}
	a := probeReadyz(ctx, c)
	tl.log("probe", "%s still starting: %v", c.name, a)
	return a
}

// hold keeps the controllers serving until ctx ends (an interrupt), after
// saying how to probe them: each controller port serves its board's
// readiness and its timeline, and its components' metrics.
func hold(ctx context.Context, tl *timeline, ctrls []*controller) {
	tl.write(func(out io.Writer) {
		fmt.Fprintln(out, "\nholding: the controllers keep serving until interrupted (Ctrl-C); probe them with")
		for _, c := range ctrls {
			for _, e := range holdEndpoints {
				fmt.Fprintf(out, "  curl -s '%s%s'   # %s: %s\n", baseURL(c), e.path, c.name, e.what)
			}
		}
	})
	<-ctx.Done()
	tl.write(func(out io.Writer) { fmt.Fprintln(out, "interrupted: shutting down") })
}

// holdEndpoints are what -hold prints a curl line for, on each controller
// port.
var holdEndpoints = []struct{ path, what string }{
	{"/readyz?verbose", "what startup waits on, a line per gate"},
	{"/timeline", "the critical chain, as systemd-analyze prints it"},
	{"/timeline?format=json", "every gate: added, opened or failed, what it waited for"},
	{"/timeline?format=svg", "the timeline as a picture (save it, open it in a browser)"},
	{"/timeline?format=trace", "the timeline as trace events (open it in Perfetto)"},
	{"/metrics", "every component's counters and states, for Prometheus"},
}
