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
//	g.Enter(upgrade.RunningSteps)
//	if err := runSteps(); err != nil { g.Fail(err) } else { g.Complete() }
//
// RPC servers guard each call with g.Err() or an Allowlist's Check.
//
// Client:
//
//	err := upgrade.Retry(ctx, nil, func(ctx context.Context) error {
//		resp, err := client.Do(req.WithContext(ctx))
//		if err != nil { return err }
//		defer resp.Body.Close()
//		return upgrade.ErrorFromResponse(resp) // nil, or a refusal to wait out
//	})
package upgrade
