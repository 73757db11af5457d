// Package gate provides one-shot named gates: a way for independent workers
// to wait for one another to finish a task without explicit dependencies
// between them.
//
// It answers two failures seen in large agent systems: workers that started
// too early (an API client dialling a peer because its own server was not up
// yet) and startups that stalled with nothing to say but "dependency not
// available". A Lock opens once (Unlock) or fails for good (Fail); AllOf and
// AnyOf compose gates; a Board says which gates startup is still waiting on
// and for how long; Flag and Output adapt a gate to a dependency engine
// without importing one.
//
//	portOpen := gate.New("controller-port")
//	go func() { bind(); portOpen.Unlock() }()
//	if err := gate.Wait(ctx, portOpen); err != nil { return err }
//
// The Waiter and Unlocker interfaces have the method sets of juju's
// worker/gate, so juju code accepts these gates unchanged. Package gatetest
// helps unit-test startup ordering without sleeps.
package gate
