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

// agentStats is what the herd of agents saw.
type agentStats struct {
	admitted  atomic.Int64
	perCtrl   []atomic.Int64
	refused   atomic.Int64 // connection refused (API port closed), retried
	upgrading atomic.Int64 // "upgrade in progress", retried
	failed    atomic.Int64
	firstErr  atomic.Value
}

// runAgents starts the herd: every agent logs in on its controller's API
// port from the start, retrying refusals (port closed, upgrade in progress)
// with upgrade.Retry, and returns once every agent is admitted or ctx ends.
func runAgents(ctx context.Context, o options, tl *timeline, ctrls []*controller) *agentStats {
	st := &agentStats{perCtrl: make([]atomic.Int64, len(ctrls))}
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	defer client.CloseIdleConnections()
	milestones := []int{1, o.agents / 4, o.agents / 2, 3 * o.agents / 4, o.agents}
	var logged sync.Map
	retryable := func(err error) bool {
		return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, upgrade.ErrUpgradeInProgress)
	}

	tl.log("agents", "%d agents start logging in on the api ports, retrying refusals", o.agents)
	var wg sync.WaitGroup
	for i := range o.agents {
		ci := i % len(ctrls)
		url := fmt.Sprintf("http://%s/agent/login?agent=%d", ctrls[ci].apiAddress(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := upgrade.Retry(ctx, clock.WallClock, func(ctx context.Context) error {
				return httpCall(ctx, client, "GET", url)
			},
				upgrade.WithRetryIf(retryable),
				upgrade.WithBackoff(o.agentBackoff, 20*o.agentBackoff),
				upgrade.WithNotify(func(_ int, err error, _ time.Duration) {
					if errors.Is(err, upgrade.ErrUpgradeInProgress) {
						st.upgrading.Add(1)
					} else {
						st.refused.Add(1)
					}
				}))
			if err != nil {
				st.failed.Add(1)
				st.firstErr.CompareAndSwap(nil, err)
				return
			}
			st.perCtrl[ci].Add(1)
			n := int(st.admitted.Add(1))
			for _, m := range milestones {
				if n == m {
					if _, dup := logged.LoadOrStore(m, true); !dup {
						tl.log("agents", "%d/%d admitted", n, o.agents)
					}
				}
			}
		}()
	}
	wg.Wait()
	return st
}
