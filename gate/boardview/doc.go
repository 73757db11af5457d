// Package boardview presents a gate.Board to people and programs: a
// Kubernetes-style readiness probe, and the startup timeline as text,
// JSON, an SVG picture and Chrome trace events — of one board, or of
// several boards and processes on one time axis. It only reads a board's
// Report and Timeline, so it can never hold a gate or change a board
// (gate/DESIGN.md, "Why gates").
//
// Each exported name's doc states its answers. In every one, nothing a
// name, a cause or a Detail says can write a line of its own or fill the
// answer: they are printed printable (a control character, such as a
// newline in an error, and a byte that is not UTF-8 replaced by a
// printable one: "␊", U+FFFD) and bounded (names cut at 256 bytes,
// Details and causes at 1 KiB, ending in "…").
//
// Serve a board beside the program's other routes, and write several:
//
//	mux.Handle("/readyz", boardview.ReadyHandler(board))
//	mux.Handle("/timeline", boardview.TimelineHandler(board)) // ?format=json|svg|trace, ?gate=name
//	boardview.WriteTrace(f, c0.Timeline(), c1.Timeline(), c2.Timeline())
package boardview
