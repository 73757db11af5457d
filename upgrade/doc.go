// Package upgrade is an upgrade-in-progress gate for agent servers, its
// wire format, and the client side that waits it out instead of failing.
//
// Until its upgrade steps have run and it knows it needs no new agent
// binaries, a server offers only a small API and refuses everything else.
// In the incident this answers (a deployer run right after bootstrap),
// clients could only string-match "upgrade in progress" and sleep 1 s × 60.
// Here a refusal is a typed error (ErrUpgradeInProgress, whose RetryAfter
// method carries the server's hint) and, over HTTP, a 503 with a
// Retry-After drawn per refusal from [R, 2R] — so a herd of generic clients,
// which sleep exactly what they are told, does not come back in lock-step —
// and a JSON code that ErrorFromResponse decodes. A refused call is never
// executed, which is what makes Retry safe. A failed upgrade
// (ErrUpgradeFailed) is a 409 without Retry-After, which generic retrying
// clients (go-retryablehttp, curl --retry, urllib3) do not retry, so they
// stop with the cause instead of retrying a 503 for half a minute.
//
// Server:
//
//	g := upgrade.NewGate(upgrade.GateConfig{Logger: logger}) // starts in PhaseChecking
//	h := upgrade.Middleware(g, isStatusCall)(mux)
//	board.Follow("upgrade", g)       // readyz: phase while locked, cause once failed
//	// ... check binaries (see upgrade/binaries), then
//	err := g.RunSteps(ctx, runSteps) // PhaseComplete, or Fail on a step's own error
//
// RunSteps fails the gate only on a step's own error: when ctx ends (a
// SIGTERM mid-upgrade) the gate stays in progress, so clients keep waiting
// (503) rather than stopping for good (409 "upgrade failed: context
// canceled"), and the agent's next start runs the steps again. Enter,
// Complete and Fail remain for servers that drive the phases themselves.
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
// One jitter, the server's: each refusal's Retry-After is drawn by the
// server from [R, 2R] (R is its gate's RetryAfter), and clients wait
// exactly that, so a herd refused together comes back spread over R and no
// client waits more than 2R per refusal.
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
// A Gate and its clients run inside a testing/synctest bubble (Go 1.25
// and later) on their default clocks (a nil GateConfig.Clock, no
// WithClock): steps that sleep and every Retry-After waited out take fake
// time, so a test asserts exact durations — a client's wait is exactly
// the sum of the Retry-After values it was sent. Reach the server through
// an http.RoundTripper that calls the handler (Middleware, ReadyHandler)
// with an httptest.ResponseRecorder, not through a listener: a goroutine
// blocked on a socket is not durably blocked, and fake time stands still
// while it waits. synctest_test.go in this package shows the phases, Retry,
// WaitReady and a herd of RetryTransports that way.
//
// # Counts and logs
//
// Counts flow one way: the gate counts the calls it decides while it
// refuses (one atomic add per call, nothing once it is complete) and
// Report().Calls reads them — one CallsReport per refusing phase
// (checking, running-steps, failed), since NewGate and across epochs:
// Refused (503 or 409; gRPC Unavailable or FailedPrecondition) and
// Admitted (allowlisted). The metrics module exports them.
//
// The Logger carries transitions only: one record per phase change (its
// level and keys are in the repository's catalogue, docs/catalogue.md). A gate holds
// no timer and no goroutine, so it never writes a record, counts or calls
// its hook after the calls made to it have returned. A cancelled RunSteps (SIGTERM) is not a transition and logs
// nothing. The clients log nothing: WithNotify is their hook, run inside
// the call.
package upgrade
