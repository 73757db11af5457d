package dialer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
)

// The enable-ha deadlock (see doc.go): machine-0 is the only controller;
// machine-1 and machine-2 are new controllers whose servers can start only
// after an existing controller has admitted them (in the incident: mongo
// joining the replica set once the machiner reported "Starting"). Each new
// controller's agent must therefore report itself over its API client
// before its own server can serve.

// controller is an in-process controller on loopback: a controller port
// that is listened on only once the controller is ready, and a server that
// admits new controllers ("report <name>") and answers anything else with
// "<name> <line>".
type controller struct {
	name  string
	port  int
	res   *reservation // holds port, refusing, until start listens on it
	ready chan struct{}
	rec   *recorder // its agent's dials

	mu       sync.Mutex
	srv      *server
	admitted []string
}

func newController(t *testing.T, name string) *controller {
	res := reserve(t)
	c := &controller{name: name, port: res.port, res: res, ready: make(chan struct{}), rec: newRecorder(nil)}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.srv != nil {
			c.srv.stop()
		}
	})
	return c
}

func (c *controller) addr() string { return localAddrs(c.port)[0] }

// start opens the controller's server and closes its LocalReady.
func (c *controller) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ln, err := c.res.listen()
	if err != nil {
		return err
	}
	c.srv = serve(c.name, ln, c.handle)
	close(c.ready)
	return nil
}

func (c *controller) handle(line string) string {
	if who, ok := strings.CutPrefix(line, "report "); ok {
		c.mu.Lock()
		c.admitted = append(c.admitted, who)
		c.mu.Unlock()
		return "admitted " + who
	}
	return c.name + " " + line
}

func (c *controller) admittedNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.admitted)
}

func (c *controller) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// dialer returns the API-client dialer of c's agent: its own port, and the
// other controllers as peers.
func (c *controller) dialer(t *testing.T, p dialer.Policy, all []*controller) *dialer.Dialer {
	var peers []string
	for _, o := range all {
		if o != c {
			peers = append(peers, o.addr())
		}
	}
	return mustNew(t, dialer.Config{
		LocalPort:       c.port,
		Remote:          func() []string { return peers },
		Policy:          p,
		LocalReady:      c.ready,
		LocalReadyGrace: 20 * time.Millisecond,
		// Long enough that a loaded -race run never starts [::1] before
		// 127.0.0.1 has answered: the test asserts the IPv4 address wins.
		// Refused peers hand over at once, so it never slows a join.
		HeadStart:   time.Second,
		MinBackoff:  time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
		DialContext: c.rec.DialContext,
	})
}

// joinOutcome is what a new controller's agent achieved.
type joinOutcome struct {
	first, final     dialer.Route
	peerDialsAtReady int // peer dials made before the controller was ready
	err              error
}

// join is a new controller's agent: report to a controller over the
// dialer, start the local server once admitted, then move the API
// connection to the local server as soon as it is ready.
func (c *controller) join(ctx context.Context, d *dialer.Dialer, peers []string) (out joinOutcome) {
	conn, route, err := d.Dial(ctx)
	if err != nil {
		out.err = err
		return out
	}
	out.first = route
	defer func() { conn.Close() }()
	reply, err := roundTripCtx(ctx, conn, "report "+c.name)
	if err != nil {
		out.err = err
		return out
	}
	if reply != "admitted "+c.name {
		out.err = fmt.Errorf("%s not admitted: %q", c.name, reply)
		return out
	}
	if err := c.start(); err != nil {
		out.err = err
		return out
	}
	out.peerDialsAtReady = c.rec.count(peers...)
	if !route.Local {
		// The API caller holds a peer connection: it moves to its own
		// server as soon as that is ready.
		select {
		case <-route.LocalReady:
		case <-ctx.Done():
			out.err = ctx.Err()
			return out
		}
		conn.Close()
		if conn, route, err = d.Dial(ctx); err != nil {
			out.err = err
			return out
		}
	}
	out.final = route
	if reply, err = roundTripCtx(ctx, conn, "ping"); err != nil {
		out.err = err
	} else if reply != c.name+" ping" {
		out.err = fmt.Errorf("%s reached %q, not itself", c.name, reply)
	}
	return out
}

func enableHA(t *testing.T, p dialer.Policy, timeout time.Duration) (c0 *controller, joiners []*controller, outs []joinOutcome) {
	c0 = newController(t, "machine-0")
	require.NoError(t, c0.start())
	joiners = []*controller{newController(t, "machine-1"), newController(t, "machine-2")}
	all := append([]*controller{c0}, joiners...)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	outs = make([]joinOutcome, len(joiners))
	var wg sync.WaitGroup
	for i, c := range joiners {
		d := c.dialer(t, p, all)
		var peers []string
		for _, o := range all {
			if o != c {
				peers = append(peers, o.addr())
			}
		}
		wg.Go(func() { outs[i] = c.join(ctx, d, peers) })
	}
	wg.Wait()
	return c0, joiners, outs
}

// Under RequireLocalWhenReady the new controllers wait out the grace
// period, report to a peer, become ready, and move to themselves; after
// ready they never dial a peer again.
func TestEnableHANewControllersReportToPeerThenGoLocal(t *testing.T) {
	c0, joiners, outs := enableHA(t, dialer.RequireLocalWhenReady, 10*time.Second)
	for i, c := range joiners {
		out := outs[i]
		require.NoError(t, out.err, c.name)
		assert.False(t, out.first.Local, "%s: first route must be a peer, its server was not up", c.name)
		assert.True(t, out.final.Local, "%s: final route must be local", c.name)
		assert.True(t, c.isReady(), c.name)
		var peers []string
		for _, o := range append([]*controller{c0}, joiners...) {
			if o != c {
				peers = append(peers, o.addr())
			}
		}
		assert.Equal(t, out.peerDialsAtReady, c.rec.count(peers...), "%s dialled a peer after it was ready", c.name)
		assert.Equal(t, localAddrs(c.port)[0], c.rec.dialled()[len(c.rec.dialled())-1])
	}
	var admitted []string
	for _, c := range append([]*controller{c0}, joiners...) {
		admitted = append(admitted, c.admittedNames()...)
	}
	assert.ElementsMatch(t, []string{"machine-1", "machine-2"}, admitted)

	// The established controller's own agent goes local at once.
	d := c0.dialer(t, dialer.RequireLocalWhenReady, append([]*controller{c0}, joiners...))
	conn, route, err := d.Dial(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	assert.True(t, route.Local)
	assert.Equal(t, []string{c0.addr()}, c0.rec.dialled())
}

// The naive rule — "I am a controller, so I require localhost" — deadlocks
// the same enable-ha: each new controller dials only its own port, which
// cannot open before it has reported to a peer. Only ctx ends the wait.
func TestRequireLocalByRoleDeadlocksEnableHA(t *testing.T) {
	c0, joiners, outs := enableHA(t, dialer.RequireLocal, 300*time.Millisecond)
	for i, c := range joiners {
		err := outs[i].err
		require.Error(t, err, c.name)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", c.name, err)
		de := dialError(t, err)
		assert.Equal(t, dialer.RequireLocal, de.Policy)
		assert.Equal(t, localAddrs(c.port), attemptAddrs(de), "%s tried only itself", c.name)
		assert.Greater(t, de.Attempts[0].Tries, 1, "%s kept retrying itself", c.name)
		for _, a := range c.rec.dialled() {
			assert.Contains(t, localAddrs(c.port), a, "%s dialled a peer", c.name)
		}
		assert.False(t, c.isReady(), "%s became ready without reporting", c.name)
	}
	assert.Empty(t, c0.admittedNames(), "no new controller ever reached machine-0")
}
