// Package gate provides one-shot named gates: a way for independent workers
// to wait for one another to finish a task without explicit dependencies
// between them (DESIGN.md tells why).
//
// What it promises:
//   - A Lock opens once (Unlock) or fails for good (Fail); the first call
//     wins. Wait returns nil once it is open, an error naming the gate and
//     matching its cause (errors.Is; ErrFailed, *FailedError) once it
//     failed, or ctx.Err(). IsUnlocked and Wait on an open gate take a few
//     nanoseconds and never allocate, lock or log. The zero Lock is usable.
//   - AllOf opens when every part has and fails as soon as one fails; AnyOf
//     opens when one part has and fails when all have.
//   - A Board says which entries startup still waits on, for how long, in
//     which order they opened and why any failed (Report), and afterwards
//     which chain of entries made it slow (Timeline, CriticalChain). It
//     takes an entry one of two ways: a Waiter (Add; a *Lock is recorded
//     the moment it resolves) or a Component kept outside this package
//     (Follow: its channels, its Cause once failed, its Detail while
//     locked, in its own words), each under a name it has not got already
//     (a second is a failed entry, "api-port (2)", matching
//     ErrDuplicateName). Reading a board never blocks on a gate. What it
//     prints for people (Report.String, a Chain) is printable and cut.
//     Once Close has returned, a board logs nothing, calls no Component
//     method and runs no goroutine.
//   - A board drains as it starts: once BoardConfig.Drain closes, a locked
//     entry "draining" is on it at once (it is never ready again), then
//     Draining closes for what must refuse or hand over next, and the
//     stop's own steps are entries added after it ("calls finished",
//     "lease handed over"), on the same Report and Timeline.
//   - Flag and Output adapt a gate to a dependency engine without importing
//     one; package gate/manifold (its own module) does the whole wiring for
//     juju's.
//
// The Waiter and Unlocker interfaces have the method sets of juju's
// worker/gate, so juju code accepts these gates unchanged. Package
// gate/boardview presents a board (a Kubernetes-style /readyz, the timeline
// as text, JSON, SVG and trace events); package gatetest helps unit-test
// startup ordering without sleeps.
//
//	board := gate.NewBoard(gate.BoardConfig{Name: "c0", Logger: logger})
//	defer board.Close()
//	portOpen := gate.New("controller-port")
//	board.Add("controller-port", portOpen)
//	upgraded := board.Follow("upgrade", upgrades) // an *upgrade.Gate: its phase and cause on the board
//	stable := gate.AllOf("stable", portOpen, upgraded)
//	board.Add("stable", stable)
//	go func() { bind(); portOpen.Unlock() }()
//	if err := gate.Wait(ctx, stable); err != nil {
//		return fmt.Errorf("startup: %w (%s)", err, board.Report())
//	}
//	fmt.Print(board.Timeline().CriticalChain("")) // api-port @2.1s +100ms / └─stable @2s / ...
package gate
