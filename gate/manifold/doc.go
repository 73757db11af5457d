// Package manifold runs coldstart gates in juju's dependency engine
// (github.com/juju/worker/v4/dependency) with no glue code: three calls
// wire a gate, its flag and the workers that must wait for it.
//
// Without it every user wrote the same forty lines — a worker to hold the
// lock, an Output func, a Start around gate.NewFlag, a Filter mapping
// gate.ErrUnlocked to dependency.ErrBounce — and a gate that failed turned
// its flag into a restart loop: an ERROR log and a bounce of every
// dependent once per ErrorDelay, for ever. Here a failed gate is logged
// once, its cause stays in the engine's report, and its dependents never
// start, while the rest of the engine runs on.
//
//	steps := gate.New("upgrade-steps")
//	dependency.Install(engine, dependency.Manifolds{
//		"upgrade-steps-gate": manifold.Lock(steps),
//		"upgrade-steps-flag": manifold.Flag("upgrade-steps-gate"),
//		"upgrader":           upgraderManifold, // gets a gate.Unlocker from "upgrade-steps-gate"
//		"api-server":         manifold.Gated(apiServerManifold, "upgrade-steps-flag"),
//	})
//
// The workers report through the engine's Report (what juju_engine_report
// shows): the gate's name, its state (locked, unlocked, failed), since when,
// and a failure's cause; a flag adds the value it checked. Make the Lock
// manifolds with Config{Clock: engineClock}.Lock(l) to stamp "since" on the
// engine's clock.
//
// It is its own module, so that importing package gate never pulls in
// juju's worker packages. Package gate/manifoldv5 is the same adapter for
// github.com/juju/worker/v5; both share one core and are held to one test
// kit, so they behave alike.
package manifold
