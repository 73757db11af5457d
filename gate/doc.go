// Package gate provides one-shot named gates: a way for independent workers
// to wait for one another to finish a task without explicit dependencies
// between them.
//
// It answers two failures seen in large agent systems: workers that started
// too early (an API client dialling a peer because its own server was not up
// yet) and startups that stalled with nothing to say but "dependency not
// available". A Lock opens once (Unlock) or fails for good (Fail); AllOf and
// AnyOf compose gates; a Board says which gates startup is still waiting on
// and for how long — in Go (Report), or over HTTP as a Kubernetes-style
// /readyz (Handler) that a kubelet, a load balancer or curl can probe —
// and, afterwards, which chain of gates made startup slow (Timeline). Flag
// and Output adapt a gate to a dependency engine without importing one;
// package gate/manifold (its own module) does the whole wiring for juju's.
//
//	board := gate.NewBoard(gate.BoardConfig{Logger: logger}) // Clock too, in tests
//	portOpen := board.New("controller-port")
//	upgraded := board.Follow("upgrade", upgrades) // an *upgrade.Gate: its phase and cause on the board
//	stable := gate.AllOf("stable", portOpen, upgraded)
//	board.Add(stable)
//	http.Handle("/readyz", board.Handler()) // 200 "ok", or 503 and a line per gate
//	go func() { bind(); portOpen.Unlock() }()
//	if err := gate.Wait(ctx, stable); err != nil { return err }
//
// A component kept outside this package joins the board through Follow
// (any Component: Completed and Failed channels, a Cause and a Detail, as
// *upgrade.Gate has), and its entry speaks in the component's words —
// "[-]upgrade locked for 3s (running upgrade steps)", "[-]upgrade failed:
// upgrade steps: disk full" — with no state copied by hand; Watch takes a
// bare pair of channels. A failed gate's error is a *FailedError (the
// gate's Name and the cause) matching ErrFailed, so a custom engine's
// filter tells "this gate failed" from its workers' own errors and names
// it. The zero Lock is a locked gate with no name, ready to use.
//
// A board also remembers what startup waited on, as systemd-analyze does
// for a machine: Timeline keeps when each entry was added, opened or
// failed and what it waited for (a composite's parts, or the inputs given
// to Lock.After), and CriticalChain follows each entry back through the
// input that resolved last — "@" when each link opened, "+" how long it
// took after its input. TimelineHandler serves it: the chain as text, the
// whole timeline as JSON, or an SVG picture a browser shows as is (a bar
// per entry, the chain drawn dark):
//
//	http.Handle("/timeline", board.TimelineHandler()) // ?format=json|svg, ?gate=name
//	fmt.Print(board.Timeline().CriticalChain(""))      // api-port @2.1s +100ms / └─stable @2s / ...
//
// BoardConfig's Logger gets one record as each entry opens ("gate opened",
// Info) or fails ("gate failed", Warn), with the keys gate, waited and err;
// IsUnlocked and Wait never touch it.
//
// The Waiter and Unlocker interfaces have the method sets of juju's
// worker/gate, so juju code accepts these gates unchanged. Package gatetest
// helps unit-test startup ordering without sleeps.
package gate
