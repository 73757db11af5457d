package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/juju/clock"

	"github.com/coldstart-go/coldstart/upgrade"
)

// agentCap is how far an agent's retry backoff grows, in multiples of
// -agent-backoff: with the default 50ms, every agent retries at most 200ms
// apart, so a port's 1000 agents press far harder than its limit of
// 1000/s admits them, however busy the machine.
const agentCap = 4

// agentSlots bounds the agents attempting to connect at once. The agents share this
// process, and its two or so cores, with the controllers: without a bound,
// thousands of runnable agent goroutines queued ahead of every controller
// goroutine woken by the network (a self-dial took seconds, a lease renewal
// came too late). Agents on their own machines would not compete so.
const agentSlots = 256

// agentStats is what the herd of agents saw.
type agentStats struct {
	perCtrl   []portStats  // by controller index
	admitted  atomic.Int64 // over all ports
	upgrading atomic.Int64
	failed    atomic.Int64
	firstErr  atomic.Pointer[error] // agents fail with errors of many types
}

// portStats is what the agents of one controller's API port saw.
type portStats struct {
	agents   int          // agents logging in on this port
	admitted atomic.Int64 // logged in
	refused  atomic.Int64 // connection refused (API port closed), retried
	// firstRefused is closed at the first refusal (or at once if the port
	// has no agents).
	firstRefused chan struct{}
	once         sync.Once
}

// herd is the running agents.
type herd struct {
	stats   *agentStats
	slots   chan struct{} // one per agent attempting to connect now (agentSlots)
	done    chan struct{}
	o       options
	tl      *timeline
	loggedN sync.Map // admitted counts already logged
}

// startAgents starts the herd: every agent logs in on its controller's API
// port from the start, retrying a closed port with upgrade.Retry (its
// transport waits out an upgrade in progress), until it is admitted or ctx
// ends.
func startAgents(ctx context.Context, o options, tl *timeline, ctrls []*controller) *herd {
	h := &herd{
		stats: &agentStats{perCtrl: make([]portStats, len(ctrls))},
		slots: make(chan struct{}, agentSlots),
		done:  make(chan struct{}),
		o:     o,
		tl:    tl,
	}
	for i := range h.stats.perCtrl {
		h.stats.perCtrl[i].firstRefused = make(chan struct{})
		h.stats.perCtrl[i].agents = o.agents / len(ctrls)
		if i < o.agents%len(ctrls) {
			h.stats.perCtrl[i].agents++
		}
		if h.stats.perCtrl[i].agents == 0 {
			close(h.stats.perCtrl[i].firstRefused)
		}
	}
	// An agent waits an upgrade out in its transport: a controller that
	// re-enters upgrade mode refuses its calls with 503 and a Retry-After,
	// and RetryTransport waits exactly that and resends. (Here each API
	// port opens only once its upgrade completed, so the count must stay 0.)
	client := &http.Client{Transport: upgrade.RetryTransport(&http.Transport{
		DisableKeepAlives: true,
		DialContext:       h.dial,
	}, upgrade.WithNotify(func(int, error, time.Duration) { h.stats.upgrading.Add(1) }))}
	tl.log("agents", "%d agents start logging in on the api ports, retrying refusals", o.agents)
	var wg sync.WaitGroup
	for i := range o.agents {
		ci := i % len(ctrls)
		url := fmt.Sprintf("http://%s/agent/login?agent=%d", ctrls[ci].apiAddress(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.agent(ctx, client, url, &h.stats.perCtrl[ci])
		}()
	}
	go func() {
		wg.Wait()
		client.CloseIdleConnections()
		close(h.done)
	}()
	return h
}

// slotKey carries, in an attempt's context, the func that frees its slot.
type slotKey struct{}

// attempt makes one login attempt in one of agentSlots, which it frees once
// the agent is connected (see dial) or the attempt ends: a connected agent
// waits for its login without a slot, in the port's backlog while the
// port's rate limit holds it back.
func (h *herd) attempt(ctx context.Context, client *http.Client, url string) error {
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	var once sync.Once
	free := func() { once.Do(func() { <-h.slots }) }
	defer free()
	return httpCall(context.WithValue(ctx, slotKey{}, free), client, "GET", url, "")
}

// dial connects an agent and frees its attempt's slot.
func (h *herd) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if free, ok := ctx.Value(slotKey{}).(func()); ok {
		free()
	}
	return conn, err
}

// agent logs in at url, retrying refusals.
func (h *herd) agent(ctx context.Context, client *http.Client, url string, port *portStats) {
	err := upgrade.Retry(ctx, func(ctx context.Context) error {
		return h.attempt(ctx, client, url)
	},
		upgrade.WithRetryIf(func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }),
		upgrade.WithBackoff(h.o.agentBackoff, agentCap*h.o.agentBackoff),
		upgrade.WithNotify(func(int, error, time.Duration) {
			port.refused.Add(1)
			port.once.Do(func() { close(port.firstRefused) })
		}), upgrade.WithClock(clock.WallClock))
	if err != nil {
		h.stats.failed.Add(1)
		h.stats.firstErr.CompareAndSwap(nil, &err)
		return
	}
	port.admitted.Add(1)
	h.logAdmitted(int(h.stats.admitted.Add(1)))
}

// logAdmitted logs the first admission and each quarter of the herd.
func (h *herd) logAdmitted(admitted int) {
	n := h.o.agents
	for _, m := range []int{1, n / 4, n / 2, 3 * n / 4, n} {
		if admitted == m {
			if _, dup := h.loggedN.LoadOrStore(m, true); !dup {
				h.tl.log("agents", "%d/%d admitted", admitted, n)
			}
		}
	}
}

// refusedEverywhere returns once every API port with agents has refused
// one, or ctx ended.
func (h *herd) refusedEverywhere(ctx context.Context) {
	for i := range h.stats.perCtrl {
		select {
		case <-h.stats.perCtrl[i].firstRefused:
		case <-ctx.Done():
			return
		}
	}
}

// wait returns the herd's stats once every agent is admitted or has given
// up (ctx ended).
func (h *herd) wait() *agentStats {
	<-h.done
	return h.stats
}
