// Package boardview presents a gate.Board to people and programs: a
// Kubernetes-style readiness probe, and the startup timeline as text,
// JSON, an SVG picture and Chrome trace events — of one board, or of
// several boards and processes on one time axis. It only reads a board's
// Report and Timeline, so it can never hold a gate or change a board
// (gate/DESIGN.md, "Why gates").
//
// What it promises:
//
//   - ReadyHandler answers as Kubernetes' /readyz does (200 "ok" or 503,
//     ?verbose, ?exclude, JSON by Accept) and never blocks.
//
//   - TimelineHandler serves the board's critical chain as text, the whole
//     timeline as JSON, an SVG, or trace events, chosen by ?format or
//     Accept, and never blocks.
//
//   - WriteTrace writes timelines as Chrome trace-event JSON (Perfetto,
//     chrome://tracing): a process per board, a track per entry, times on
//     the wall clock, so traces of several processes line up; MergeTraces
//     joins such files into one. WriteSVG draws several boards as
//     swimlanes on one time axis; ReadTimeline reads back the JSON that
//     TimelineHandler serves, so a picture can be drawn from other
//     processes' answers.
//
//   - Nothing a name, a cause or a Detail says can write a line of its own
//     or fill an answer: every answer prints them printable (a control
//     character, such as a newline in an error, and a byte that is not
//     UTF-8 replaced by a printable one: "␊", U+FFFD) and bounded (names
//     cut at 256 bytes, Details and causes at 1 KiB, ending in "…").
//
// Serve a board beside the program's other routes, and write several:
//
//	mux.Handle("/readyz", boardview.ReadyHandler(board))
//	mux.Handle("/timeline", boardview.TimelineHandler(board)) // ?format=json|svg|trace, ?gate=name
//	boardview.WriteTrace(f, c0.Timeline(), c1.Timeline(), c2.Timeline())
package boardview
