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
//	g := upgrade.NewGate(upgrade.GateConfig{Logger: logger}) // starts in Checking
//	h := upgrade.Middleware(g, isStatusCall)(mux)
//	board.Follow("upgrade", g)       // readyz: phase while locked, cause once failed
//	// ... check binaries (see upgrade/binaries), then
//	err := g.RunSteps(ctx, runSteps) // Complete, or Fail on a step's own error
//
// RunSteps fails the gate only on a step's own error: when ctx ends (a
// SIGTERM mid-upgrade) the gate stays in progress, so clients keep waiting
// (503) rather than stopping for good (409 "upgrade failed: context
// canceled"), and the agent's next start runs the steps again. Enter,
// Complete and Fail remain for servers that drive the phases themselves.
//
// RPC servers guard each call that is not on their allowlist with g.Err(),
// per call; gRPC servers use the interceptors of upgrade/grpcupgrade. The
// gate is a gate.Component (Completed, Failed, Cause, Detail), so a board
// of gates shows it in its own words.
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
// # Logs and counters
//
// The clock and the logger arrive one way: GateConfig's Clock and Logger
// for a gate, the options WithClock and WithLogger for Retry, WaitReady,
// RetryTransport and grpcupgrade's client interceptors. nil means
// clock.WallClock and no logs; nothing reads slog.Default. A gate logs:
//
//   - "upgrade phase changed", INFO (ERROR for Failed): phase (the new
//     one), from (the one it left), lasted (how long that lasted), epoch,
//     and err (the cause) for Failed. SetRetryAfter is not a phase change.
//   - "calls refused during upgrade", one record per refusing phase per
//     10 s while calls arrive, never one per call: phase, refused,
//     admitted (allowlisted), interval; INFO, WARN for phase=failed (those
//     were 409s: clients stopped).
//
// Report().Calls has the same counts since NewGate, across epochs, one
// CallsReport per refusing phase (checking, running-steps, failed), for
// status pages and metrics: Refused (503 or 409; gRPC Unavailable or
// FailedPrecondition) and Admitted. Middleware and grpcupgrade's server
// interceptors count their calls; an RPC server of your own calls Admit
// (Err counts nothing). A call costs one atomic add while the gate
// refuses, and nothing once it is complete: the logger is never on the
// request path.
//
// A client with WithLogger counts its waits the same way: "waiting out
// upgrade refusals" (INFO: waits, interval) and "gave up waiting for
// upgrade" (WARN: gave_up, interval, err, the latest) — a call that gave
// up is one whose ctx ended, or whose deadline came before the server's
// wait. One WithLogger option value keeps one set of counts for every
// call made with it, so RetryTransport and the interceptors, which keep
// their options, log all their requests together. A WithLogger made per
// call is a set of counts per call — one record per call, its last counts
// up to an interval late — so code that calls Retry or WaitReady many
// times builds a RetryLog once, passes its Option, and closes it at
// shutdown, which logs the counts still pending:
//
//	waits := &upgrade.RetryLog{Logger: logger}
//	defer waits.Close()
//	err := upgrade.Retry(ctx, call, waits.Option())
package upgrade
