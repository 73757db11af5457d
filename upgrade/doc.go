// Package upgrade is an upgrade-in-progress gate for agent servers, and the
// client side that waits it out instead of failing.
//
// Until its upgrade steps have run and it knows it needs no new agent
// binaries, a server offers only a small API and refuses everything else.
// In the incident this answers (a deployer run right after bootstrap),
// clients could only string-match "upgrade in progress" and sleep 1 s × 60.
// Here a refusal is a typed error (ErrUpgradeInProgress) and, over HTTP, a
// 503 with Retry-After and a JSON code that ErrorFromResponse decodes; a
// refused call is never executed, which is what makes Retry safe. The same
// gate answers "upgrade failed" (ErrUpgradeFailed) so clients stop rather
// than retry forever. For agent binaries, MatchBinary names the wanted
// version, the platform and what is available when nothing fits, where the
// old error said only "no matching tools available".
//
// Server:
//
//	g := upgrade.NewGate(nil)                   // starts in Checking
//	h := upgrade.Middleware(g, isStatusCall)(mux)
//	// ... check binaries, then
//	_ = g.Enter(upgrade.RunningSteps)           // errors only for an invalid phase
//	if err := runSteps(); err != nil {
//		g.Fail(err) // clients get ErrUpgradeFailed and stop
//	} else {
//		g.Complete() // the full API is served
//	}
//
// RPC servers guard each call with g.Err() or an Allowlist's Check.
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
// honoured there too: errors.As finds a RetryAfter() method on it.
package upgrade
