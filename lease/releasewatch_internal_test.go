package lease

import (
	"context"
	"testing"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"

	"github.com/stretchr/testify/require"
)

// watchCounter is a ReleaseWatcher whose watches answer at once: the term
// is over.
type watchCounter struct{ watches []*leasestore.HeldError }

func (w *watchCounter) WatchRelease(_ context.Context, held *leasestore.HeldError) <-chan error {
	w.watches = append(w.watches, held)
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

// A refusal naming the term a watch said was over shows the watch wrong:
// the tracker polls. One naming another holder with that term's token — a
// release reserved for a preferred holder (k8slease) — is a term of its
// own, and is watched.
func TestReleaseWatchTellsAReservationFromAWrongWatch(t *testing.T) {
	cfg := Config{Duration: time.Second, noJitter: true}.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := &watchCounter{}
	w := releaseWatch{watcher: counter}

	require.Zero(t, w.follow(ctx, &leasestore.HeldError{Name: "x", Holder: "a", Token: 5}, cfg), "the watch said over: claim at once")
	require.Len(t, counter.watches, 1)

	require.Zero(t, w.follow(ctx, &leasestore.HeldError{Name: "x", Holder: "b", Token: 5}, cfg), "released to b: watched")
	require.Len(t, counter.watches, 2)

	require.Equal(t, cfg.ClaimInterval, w.follow(ctx, &leasestore.HeldError{Name: "x", Holder: "b", Token: 5}, cfg), "refused again by the term the watch said was over: poll")
	require.Len(t, counter.watches, 2)
}
