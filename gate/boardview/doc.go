// Package boardview presents a gate.Board to people and programs: a
// Kubernetes-style readiness probe, and the startup timeline as text,
// JSON and an SVG picture.
//
// It answers the question operators could not answer from "dependency not
// available" log spam — what is startup still waiting on, and which chain
// of gates made it slow — where they already look: a kubelet's or a load
// balancer's probe, curl, a browser, Perfetto. Package gate keeps the
// board itself and imports no net/http; everything here only reads a
// board's Report and Timeline, so it can never hold a gate or change a
// board.
//
// What it promises:
//
//   - ReadyHandler answers as Kubernetes' /readyz does (200 "ok" or 503,
//     ?verbose, ?exclude, JSON by Accept) and never blocks.
//
//   - TimelineHandler serves the board's critical chain as text, the whole
//     timeline as JSON, or an SVG, chosen by ?format or Accept, and never
//     blocks.
//
// Serve both beside the program's other routes:
//
//	mux.Handle("/readyz", boardview.ReadyHandler(board))
//	mux.Handle("/timeline", boardview.TimelineHandler(board)) // ?format=json|svg, ?gate=name
package boardview
