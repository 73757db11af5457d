// Package sdnotify tells systemd how a gate.Board's startup and drain go,
// through its notify protocol (sd_notify(3), by coreos/go-systemd's daemon
// package): READY=1 when a chosen gate opens, STATUS= what the board still
// waits on, in its own words, EXTEND_TIMEOUT_USEC= only while entries keep
// opening, WATCHDOG=1 only while the components are alive, STOPPING=1 when
// the board drains. It answers a start killed by TimeoutStartSec= while it
// was progressing (a long upgrade, a slow quorum), and one that hung for
// the whole timeout with nothing to say; it is its own module, so the
// core packages never import systemd's.
//
//	go sdnotify.Run(ctx, sdnotify.Config{Board: board, Ready: stable, Alive: []interface{ Alive() error }{tracker}})
package sdnotify
