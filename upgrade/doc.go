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
//	g := upgrade.NewGate(nil)                   // starts in Checking
//	h := upgrade.Middleware(g, isStatusCall)(mux)
//	// ... check binaries (see upgrade/binaries), then
//	_ = g.Enter(upgrade.RunningSteps)           // errors only for an invalid phase
//	if err := runSteps(); err != nil {
//		g.Fail(err) // clients get ErrUpgradeFailed and stop
//	} else {
//		g.Complete() // the full API is served
//	}
//
// RPC servers guard each call that is not on their allowlist with g.Err(),
// per call; gRPC servers use the interceptors of upgrade/grpcupgrade. A
// board of gates watches g.Completed() and g.Failed().
//
// Client (build the request inside fn: each attempt needs a fresh body):
//
//	err := upgrade.Retry(ctx, nil, func(ctx context.Context) error {
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
package upgrade
