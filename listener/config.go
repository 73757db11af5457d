package listener

import (
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/juju/clock"
	"github.com/juju/errors"
	"golang.org/x/time/rate"
)

// Port names one of the Listener's two ports. The zero value means "not a
// connection of ours" (see PortOf).
type Port int

const (
	// Controller is the port the controller uses to talk to itself and
	// to its peer controllers. It accepts from New, unthrottled.
	Controller Port = iota + 1
	// API is the public port the agents dial. It is opened by OpenAPI
	// once the controller is stable, and is rate-limited and capped.
	API
)

// String returns "controller", "api", "none" for the zero Port, or
// "Port(n)" for any other value.
func (p Port) String() string {
	switch p {
	case Controller:
		return "controller"
	case API:
		return "api"
	case 0:
		return "none"
	}
	return "Port(" + strconv.Itoa(int(p)) + ")"
}

// Config configures a Listener. ControllerAddr and APIAddr are required;
// every other field has a usable zero value.
type Config struct {
	// ControllerAddr is the TCP address of the controller port, e.g.
	// "127.0.0.1:17071" or ":0" (the kernel picks the port; OnBound and
	// Addr report it). Required: a library must not guess which
	// interface to expose.
	ControllerAddr string

	// APIAddr is the TCP address of the public API port, e.g.
	// "0.0.0.0:17070" or "[::1]:0". Required. It may only equal
	// ControllerAddr when both use port 0.
	APIAddr string

	// APIRate is the sustained rate, in connections per second, at which
	// the API port accepts. Zero (or rate.Inf) means no limit; negative
	// is invalid. The controller port is never rate-limited.
	APIRate rate.Limit

	// APIBurst is how many API connections may be accepted at once after
	// an idle spell. Zero means the smallest burst that can sustain
	// APIRate, max(1, ceil(APIRate × 2ms)) (why: DESIGN.md, "APIBurst"). A
	// positive burst below that, a negative one, or one without APIRate is
	// invalid.
	APIBurst int

	// APIMaxConns caps the number of open API-port connections; an
	// accepted connection holds its slot until it is closed (once, however
	// often Close is called). Further agents wait in the kernel's accept
	// queue. Zero means no cap; negative is invalid.
	APIMaxConns int

	// BindAPIEarly binds the API port in New, so its address is known and
	// reserved from the start, but accepts nothing until OpenAPI (agents
	// then wait in the kernel's accept queue). By default the API port is
	// not bound until OpenAPI, so agents are refused at once and back off.
	BindAPIEarly bool

	// Clock times the API rate limit and the accept-error backoff. If it
	// is nil, clock.WallClock is used.
	Clock clock.Clock

	// Logger, if not nil, receives a record for each transition of a
	// port: bound, opened or closed, the API port failing to open, an
	// accept failing for good (keys port, addr, err); nothing after Close
	// has returned. nil means no logs.
	Logger *slog.Logger

	// OnBound, if not nil, is called with each real bound address (the
	// kernel's choice for port 0) when a port is bound: the controller
	// port and an early API port in New, the API port in OpenAPI. It is
	// called synchronously (for OpenAPIWhen, on the listener's watcher
	// goroutine) and must not call OpenAPI or CloseAPI; it may call Close.
	// It is never called once Close has begun.
	OnBound func(p Port, addr net.Addr)
}

// minBurstWindow is the oversleep a timer-driven accept loop must absorb:
// the burst has to hold at least APIRate × minBurstWindow tokens.
const minBurstWindow = 2 * time.Millisecond

// Validate checks the configuration. Its errors satisfy
// errors.Is(err, errors.NotValid) (github.com/juju/errors).
func (c Config) Validate() error {
	if c.ControllerAddr == "" {
		return errors.NotValidf(`ControllerAddr "" (must be a host:port)`)
	}
	if c.APIAddr == "" {
		return errors.NotValidf(`APIAddr "" (must be a host:port)`)
	}
	_, cport, err := net.SplitHostPort(c.ControllerAddr)
	if err != nil {
		return errors.NotValidf("ControllerAddr %q (must be a host:port: %v)", c.ControllerAddr, err)
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		return errors.NotValidf("APIAddr %q (must be a host:port: %v)", c.APIAddr, err)
	}
	if c.ControllerAddr == c.APIAddr && cport != "0" && cport != "" {
		return errors.NotValidf("APIAddr %q (must differ from ControllerAddr unless its port is 0 or empty: the kernel picks one)", c.APIAddr)
	}
	if math.IsNaN(float64(c.APIRate)) || c.APIRate < 0 {
		return errors.NotValidf("APIRate %v (must be positive, or 0 for no limit)", float64(c.APIRate))
	}
	if c.APIBurst < 0 {
		return errors.NotValidf("APIBurst %d (must be positive, or 0 for the smallest that reaches APIRate)", c.APIBurst)
	}
	if !c.limited() {
		if c.APIBurst != 0 {
			return errors.NotValidf("APIBurst %d (must be 0 when APIRate is 0)", c.APIBurst)
		}
	} else if min := minBurst(c.APIRate); c.APIBurst != 0 && c.APIBurst < min {
		return errors.NotValidf("APIBurst %d (must be at least %d, ceil(APIRate × 2ms) for APIRate %v, or 0 for that)",
			c.APIBurst, min, float64(c.APIRate))
	}
	if c.APIMaxConns < 0 {
		return errors.NotValidf("APIMaxConns %d (must be positive, or 0 for no cap)", c.APIMaxConns)
	}
	return nil
}

// limited reports whether the API port is rate-limited.
func (c Config) limited() bool {
	return c.APIRate > 0 && c.APIRate != rate.Inf
}

// burst is the effective APIBurst.
func (c Config) burst() int {
	if c.APIBurst == 0 {
		return minBurst(c.APIRate)
	}
	return c.APIBurst
}

// minBurst is max(1, ceil(r × 2ms)), computed without the rounding error
// of multiplying by 0.002.
func minBurst(r rate.Limit) int {
	b := math.Ceil(float64(r) * float64(minBurstWindow) / float64(time.Second))
	if b < 1 {
		return 1
	}
	if b > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(b)
}
