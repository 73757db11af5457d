// Package manifoldv5 is package gate/manifold for juju's dependency engine
// of github.com/juju/worker/v5 (juju's main branch), with the same three
// calls and the same promises: a gate, its flag and the workers that must
// wait for it, with no glue code; a failed gate logged once, its cause kept
// in the engine's report, its dependents never started; and workers that
// report the gate's state, since when, and cause through the engine's
// Report (v5's takes a context; these reports never block).
//
//	steps := gate.New("upgrade-steps")
//	dependency.Install(engine, dependency.Manifolds{
//		"upgrade-steps-gate": manifoldv5.Config{Clock: clk}.Lock(steps),
//		"upgrade-steps-flag": manifoldv5.Flag("upgrade-steps-gate"),
//		"upgrader":           upgraderManifold, // gets a gate.Unlocker from "upgrade-steps-gate"
//		"api-server":         manifoldv5.Gated(apiServerManifold, "upgrade-steps-flag"),
//	})
//
// Both adapters run one engine-neutral core, so v4 and v5 agents behave
// alike. It is its own module, so that importing package gate never pulls
// in juju's worker packages.
package manifoldv5
