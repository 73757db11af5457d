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
// One per-call guard decides every call: Admit. Middleware calls it for
// HTTP, grpcupgrade's interceptors for gRPC, and an RPC server of your own
// for each of its calls, per call — never cached at login:
//
//	if err := g.Admit(allowlisted(method)); err != nil {
//		return err // not executed; errors.Is(err, upgrade.ErrUpgradeInProgress)
//	}
//
// Client: an http.Client whose transport waits refusals out, resending a
// request only when it can replay its body (req.GetBody):
//
//	client := &http.Client{Transport: upgrade.RetryTransport(nil)}
//	resp, err := client.Post(url, "application/json", bytes.NewReader(payload))
//
// A stop mirrors the start: Drain waits for a drain signal (a board's
// Draining()) and a grace, then refuses new calls for good (PhaseDraining;
// over HTTP with Connection: close, a GOAWAY on HTTP/2) while calls in
// flight finish.
//
// An HA group upgrades once (Gate.Group, ExampleGate_Group): the lease's
// holder runs the steps under its fencing token (Group.Lead, from its Lead
// function) and records each in a StepLog; every controller's gate opens
// when the log shows them all (Group.Wait), and its Detail says which step
// it waits for, on whom.
//
// Any other call waits refusals out with Retry (ExampleRetry), a bootstrap
// tool with WaitReady on a URL served by ReadyHandler. Settings are
// GateConfig's fields and the clients' RetryOptions; the gate counts the
// calls it decides (Report().Calls) and logs one record per phase change
// (docs/catalogue.md); its clients log nothing (WithNotify is their hook).
package upgrade
