package main

import (
	"context"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
)

// RunSingular runs the controller's leader-only worker: work runs only
// once the API port is open and only while this controller holds the
// lease, again each time it comes to lead, until ctx ends. work's ctx ends
// the moment leadership can no longer be promised (a loss, a step-down, a
// promise run out) — not when a renewal merely fails — so work that stops
// on ctx.Done never acts as a deposed leader; token fences what it writes.
func (s *Startup) RunSingular(ctx context.Context, tr *lease.Tracker, work func(ctx context.Context, token uint64) error) error {
	if err := gate.Wait(ctx, s.APIOpen); err != nil {
		return err
	}
	return tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
		return work(ctx, st.Token)
	})
}
