package sdnotify

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/internal/printable"
)

// Config is what Run tells systemd about, and how often.
type Config struct {
	// Board is the board whose own words Run sends as STATUS= and whose
	// entries opening (or failing) are the progress that extends the
	// timeout. Required.
	Board *gate.Board
	// Ready is the gate whose opening sends READY=1: the board's "stable"
	// or "api-port", what the unit's dependants may start after. Required.
	Ready gate.Waiter
	// Alive are the components the watchdog vouches for (a
	// *lease.Tracker): WATCHDOG=1 is sent only while every one's Alive
	// returns nil. Empty means the watchdog pings while Run runs.
	Alive []interface{ Alive() error }
	// Window is what each EXTEND_TIMEOUT_USEC= gives: sent at a look that
	// finds an entry resolved since the last look, before READY=1 and
	// after STOPPING=1, so that systemd's start (or stop) timeout fires
	// only once no entry has opened for Window. 0 means 30s.
	Window time.Duration
	// Interval is how often Run looks at the board: it sends STATUS= when
	// the board's words changed and EXTEND_TIMEOUT_USEC= as Window says.
	// 0 means 1s; it must be less than Window.
	Interval time.Duration
	// Clock times the looks and the watchdog. nil means clock.WallClock.
	Clock clock.Clock
}

// The defaults of Window and Interval.
const (
	defaultWindow   = 30 * time.Second
	defaultInterval = time.Second
)

// Validate reports whether the config can be run.
func (c Config) Validate() error {
	switch {
	case c.Board == nil:
		return jujuerrors.NotValidf("nil Board")
	case c.Ready == nil:
		return jujuerrors.NotValidf("nil Ready (must be the gate whose opening sends READY=1)")
	case c.Window < 0:
		return jujuerrors.NotValidf("Window %v (must be positive, or 0 for the default %v)", c.Window, defaultWindow)
	case c.Interval < 0 || c.Interval >= c.window():
		return jujuerrors.NotValidf("Interval %v (must be in [0, Window=%v): 0 for the default %v)", c.Interval, c.window(), defaultInterval)
	}
	for i, a := range c.Alive {
		if a == nil {
			return jujuerrors.NotValidf("nil Alive[%d]", i)
		}
	}
	return nil
}

func (c Config) window() time.Duration {
	if c.Window == 0 {
		return defaultWindow
	}
	return c.Window
}

// Run tells systemd, through the socket NOTIFY_SOCKET names, how the
// board's startup and drain go, until ctx ends (then it returns nil):
//
//   - READY=1 once cfg.Ready opens (not after the board started draining);
//   - STATUS= the board's own words (Report.String: what it waits on, what
//     failed; one printable line of at most 1 KiB), at once and at each
//     look where they changed;
//   - EXTEND_TIMEOUT_USEC= while entries keep opening (cfg.Window), and not
//     once they stall, so a long start is not killed and a hung one is;
//   - WATCHDOG=1 every half of WATCHDOG_USEC (daemon.SdWatchdogEnabled),
//     while every cfg.Alive is alive;
//   - STOPPING=1 once the board drains (gate.Board.Draining).
//
// Run returns nil at once when NOTIFY_SOCKET is unset (not under systemd,
// or a unit without Type=notify), and an error if cfg is not valid, the
// watchdog's environment is malformed or a notification cannot be sent.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return nil
	}
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	n := &notifier{cfg: cfg, clk: cfg.Clock, interval: cfg.Interval}
	if n.clk == nil {
		n.clk = clock.WallClock
	}
	if n.interval == 0 {
		n.interval = defaultInterval
	}
	ready, draining := cfg.Ready.Unlocked(), cfg.Board.Draining()
	// Each timer is armed after the work before it is done, so a look or
	// a ping is Interval (or half WATCHDOG_USEC) after the last one.
	err = n.look()
	look := n.clk.After(n.interval)
	var ping <-chan time.Time
	if watchdog > 0 {
		ping = n.clk.After(watchdog / 2)
	}
	for err == nil {
		select {
		case <-ctx.Done():
			return nil
		case <-ready:
			ready, n.ready = nil, true
			err = n.look(daemon.SdNotifyReady)
		case <-draining:
			// Ready no more: a READY=1 after STOPPING=1 would tell systemd
			// the unit started again.
			draining, ready, n.stopping = nil, nil, true
			err = n.look(daemon.SdNotifyStopping)
		case <-look:
			err = n.look()
			look = n.clk.After(n.interval)
		case <-ping:
			if n.alive() {
				err = n.send(daemon.SdNotifyWatchdog)
			}
			ping = n.clk.After(watchdog / 2)
		}
	}
	return err
}

// notifier is Run's state between looks.
type notifier struct {
	cfg             Config
	clk             clock.Clock
	interval        time.Duration
	ready, stopping bool
	status          string // the last STATUS= sent
	resolved        int    // the entries resolved at the last look
}

// look reads the board and sends, in one datagram, the assignments first
// and then what changed since the last look.
func (n *notifier) look(first ...string) error {
	r := n.cfg.Board.Report()
	resolved := 0
	for _, e := range r {
		if e.State != gate.StateLocked {
			resolved++
		}
	}
	msg := first
	if s := statusLine(r); s != n.status {
		n.status = s
		msg = append(msg, "STATUS="+s)
	}
	if resolved > n.resolved && (!n.ready || n.stopping) {
		msg = append(msg, fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", n.cfg.window().Microseconds()))
	}
	n.resolved = resolved
	return n.send(msg...)
}

// statusLine is what STATUS= says of r: its words as one printable line
// of at most 1 KiB, so that no name, Detail or cause on the board can end
// the assignment and write one of its own ("\nREADY=1").
func statusLine(r gate.Report) string { return printable.Text(r.String()) }

// alive reports whether every component is alive.
func (n *notifier) alive() bool {
	for _, a := range n.cfg.Alive {
		if a.Alive() != nil {
			return false
		}
	}
	return true
}

// send sends the assignments as one datagram, if there are any.
func (n *notifier) send(assignments ...string) error {
	if len(assignments) == 0 {
		return nil
	}
	if _, err := daemon.SdNotify(false, strings.Join(assignments, "\n")); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}
