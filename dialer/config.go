package dialer

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/juju/clock"
	"github.com/juju/errors"
)

// Defaults for the zero values of Config's durations.
const (
	defaultLocalReadyGrace = 3 * time.Second
	defaultHeadStart       = 250 * time.Millisecond
	defaultMinBackoff      = 50 * time.Millisecond
	defaultMaxBackoff      = 5 * time.Second
)

// Config holds the parameters of a Dialer. The zero Policy is
// RequireLocalWhenReady, so a controller needs only LocalPort, Remote and
// LocalReady; a machine without a controller sets LocalPort 0, Remote and
// Policy PreferLocal.
type Config struct {
	// LocalPort is this machine's controller port, dialled on the literal
	// loopback addresses 127.0.0.1 and [::1] (never a resolved "localhost").
	// 0 means this machine runs no controller: only peers are dialled, and
	// Policy must then be PreferLocal — the zero Policy is rejected, so that
	// a controller that forgot its port is not silently sent to its peers.
	LocalPort int

	// Remote returns the peer controller addresses ("host:port"). It is
	// called afresh for every round of every Dial, so a changed peer list
	// takes effect at once; concurrent Dials call it concurrently. It may be
	// nil (no peers) unless LocalPort is 0.
	Remote func() []string

	// Policy decides between local and peer addresses. The zero value is
	// RequireLocalWhenReady.
	Policy Policy

	// LocalReady is closed once this machine's own controller server is
	// serving. nil means never: RequireLocalWhenReady then always falls
	// back to the peers after LocalReadyGrace. Any channel works (a gate's
	// Unlocked(), for one); only its closing is observed.
	LocalReady <-chan struct{}

	// LocalReadyGrace is how long each Dial under RequireLocalWhenReady
	// waits for LocalReady before it falls back to the peers. Zero means
	// 3 s; negative is invalid.
	LocalReadyGrace time.Duration

	// HeadStart is the stagger between parallel attempts in one round: the
	// next address is tried when the previous attempt fails or HeadStart
	// after it started, whichever comes first. Zero means 250 ms; negative
	// is invalid.
	HeadStart time.Duration

	// MinBackoff and MaxBackoff bound the pause between failed rounds: it
	// starts at MinBackoff, doubles each round up to MaxBackoff, and each
	// pause is drawn uniformly from [b/2, b] (jitter, so a herd of agents
	// does not retry in step). Zero means 50 ms and 5 s; negative, or Min
	// above Max, is invalid.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// Clock times the grace period, head starts and backoff. nil means
	// clock.WallClock.
	Clock clock.Clock

	// Logger, if not nil, receives a record each time the route changes
	// (the first connection, a fallback to a peer and why, the move home:
	// keys route, addr, err), from within the call that changed it. nil
	// means no logs.
	Logger *slog.Logger

	// DialContext opens the TCP connections of Dial (Connect uses its own
	// open function instead). It must return promptly once its ctx ends: a
	// round waits for its cancelled attempts so that none leaks. nil means
	// a net.Dialer's DialContext.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Validate reports whether cfg is usable; its errors satisfy
// errors.Is(err, errors.NotValid).
func (cfg Config) Validate() error {
	if cfg.LocalPort < 0 || cfg.LocalPort > 65535 {
		return errors.NotValidf("LocalPort %d (must be 1-65535, or 0 for none)", cfg.LocalPort)
	}
	switch cfg.Policy {
	case PreferLocal:
	case RequireLocalWhenReady, RequireLocal:
		if cfg.LocalPort == 0 {
			return errors.NotValidf("Policy %v with LocalPort 0 (must be PreferLocal, which dials peers only, when there is no local controller)", cfg.Policy)
		}
	default:
		return errors.NotValidf("Policy %v (must be RequireLocalWhenReady, PreferLocal or RequireLocal)", cfg.Policy)
	}
	if cfg.LocalPort == 0 && cfg.Remote == nil {
		return errors.NotValidf("nil Remote with LocalPort 0 (must be set: there is nothing else to dial)")
	}
	if cfg.LocalReadyGrace < 0 {
		return errors.NotValidf("LocalReadyGrace %v (must be positive, or 0 for the default %v)", cfg.LocalReadyGrace, defaultLocalReadyGrace)
	}
	if cfg.HeadStart < 0 {
		return errors.NotValidf("HeadStart %v (must be positive, or 0 for the default %v)", cfg.HeadStart, defaultHeadStart)
	}
	if cfg.MinBackoff < 0 {
		return errors.NotValidf("MinBackoff %v (must be positive, or 0 for the default %v)", cfg.MinBackoff, defaultMinBackoff)
	}
	if cfg.MaxBackoff < 0 {
		return errors.NotValidf("MaxBackoff %v (must be positive, or 0 for the default %v)", cfg.MaxBackoff, defaultMaxBackoff)
	}
	if d := cfg.withDefaults(); d.MinBackoff > d.MaxBackoff {
		return errors.NotValidf("MinBackoff %v (must be at most MaxBackoff %v)", d.MinBackoff, d.MaxBackoff)
	}
	return nil
}

// withDefaults returns cfg with every zero value replaced by its default.
func (cfg Config) withDefaults() Config {
	cfg.LocalReadyGrace = cmp.Or(cfg.LocalReadyGrace, defaultLocalReadyGrace)
	cfg.HeadStart = cmp.Or(cfg.HeadStart, defaultHeadStart)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, defaultMinBackoff)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, defaultMaxBackoff)
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.WallClock)
	if cfg.DialContext == nil {
		cfg.DialContext = (&net.Dialer{}).DialContext
	}
	return cfg
}
