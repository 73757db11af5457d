// Package upgrade is an upgrade-in-progress gate for agent servers, its
// wire format, and the client side that waits it out instead of failing.
//
// Until its upgrade steps have run, a server refuses every call off its
// allowlist: a typed error (ErrUpgradeInProgress, with RetryAfter) and, over
// HTTP, a 503 with a Retry-After drawn per refusal from [R, 2R] and a JSON
// code that ErrorFromResponse decodes. A refused call is never executed,
// which is what makes Retry safe. A failed upgrade (ErrUpgradeFailed) is a
// 409 without Retry-After, which generic retrying clients do not retry.
// The reasons are in DESIGN.md.
//
// Server:
//
//	g := upgrade.NewGate(upgrade.GateConfig{Logger: logger}) // starts in PhaseChecking
//	h := upgrade.Middleware(g, isStatusCall)(mux)
//	board.Follow("upgrade", g)       // readyz: phase while locked, cause once failed
//	// ... check binaries (see upgrade/binaries), then
//	err := g.RunSteps(ctx, runSteps) // PhaseComplete, or Fail on a step's own error
//
// RunSteps fails the gate only on a step's own error: when ctx ends the
// gate stays in progress. Enter, Complete and Fail remain for servers that
// drive the phases themselves.
//
// One per-call guard decides every call: Admit. Middleware calls it for
// HTTP, grpcupgrade's interceptors for gRPC, and an RPC server of your own
// for each of its calls, per call — never cached at login:
//
//	if err := g.Admit(allowlisted(method)); err != nil {
//		return err // not executed; errors.Is(err, upgrade.ErrUpgradeInProgress)
//	}
//
// The gate is a gate.Component (Completed, Failed, Cause, Detail), so a
// board of gates shows it in its own words.
//
// Client: an http.Client whose transport waits refusals out, resending a
// request only when it can replay its body (req.GetBody):
//
//	client := &http.Client{Transport: upgrade.RetryTransport(nil)}
//	resp, err := client.Post(url, "application/json", bytes.NewReader(payload))
//
// Clients wait exactly the server's Retry-After and add no jitter (DESIGN.md,
// "One jitter").
//
// Any other call waits refusals out with Retry (build the request inside
// fn: each attempt needs a fresh body):
//
//	err := upgrade.Retry(ctx, func(ctx context.Context) error {
//		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(payload))
//		resp, err := client.Do(req)
//		if err != nil {
//			return err
//		}
//		defer resp.Body.Close()
//		return upgrade.ErrorFromResponse(resp) // nil, or a refusal to wait out
//	})
//
// Bootstrap tools that must not start work early call WaitReady on a URL
// served by ReadyHandler. A client that connects through coldstart/dialer
// and returns the refusal from its dial function gets the server's hint
// honoured there too: errors.As finds its RetryAfter() method.
//
// # Options
//
// A gate's settings are GateConfig's fields (Clock, Logger, OnTransition):
// nil means clock.WallClock, no logs, no hook; nothing reads slog.Default.
// A client's are RetryOptions (WithBackoff, WithClock, WithNotify,
// WithRetryIf), the same for Retry, WaitReady, RetryTransport and
// grpcupgrade's client interceptors. A nil RetryOption is ignored, and
// WithClock(nil) and WithNotify(nil) mean the default (the wall clock; no
// hook); WithRetryIf(nil) is not valid (errors.NotValid).
//
// # Testing in a synctest bubble
//
// A Gate and its clients run inside a testing/synctest bubble on their
// default clocks; reach the server through an http.RoundTripper that calls
// the handler, not through a listener (DESIGN.md, synctest_test.go).
//
// # Counts and logs
//
// The gate counts the calls it decides while it refuses, read by
// Report().Calls. Its Logger carries one record per phase change (see
// docs/catalogue.md), never after the calls made to it have returned; a
// cancelled RunSteps logs nothing. The clients log nothing: WithNotify is
// their hook, run inside the call.
package upgrade
