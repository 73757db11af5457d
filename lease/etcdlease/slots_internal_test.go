package etcdlease

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Waiters are served newest first; one whose ctx ends gets its error and no
// slot, and the slot goes to the next waiter.
func TestSlotsServeNewestFirst(t *testing.T) {
	s := newSlots(1)
	require.NoError(t, s.acquire(context.Background()))

	served := make(chan int, 3)
	gaveUp := make(chan error, 1)
	ctxs := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		go func() {
			if err := s.acquire(ctx); err != nil {
				gaveUp <- err
				return
			}
			served <- i
		}()
		awaitQueued(t, s, i+1)
	}
	defer func() {
		for _, cancel := range ctxs {
			cancel()
		}
	}()

	ctxs[2]() // the newest gives up: it must not take the slot
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	s.release()
	require.Equal(t, 1, <-served, "the newest waiter still waiting")
	s.release()
	require.Equal(t, 0, <-served)
	s.release()
	require.NoError(t, s.acquire(context.Background()), "the slot is free again")
}

// A call whose ctx has ended is not given a slot even if one is free.
func TestSlotsRefuseEndedContext(t *testing.T) {
	s := newSlots(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.acquire(ctx), context.Canceled)
	require.NoError(t, s.acquire(context.Background()))
}

// A call that waited for a slot until its ctx ended says the store is over
// capacity; one whose ctx had ended before it asked does not.
func TestSlotsWaitedOutIsOverCapacity(t *testing.T) {
	s := newSlots(1)
	require.NoError(t, s.acquire(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.acquire(ctx) }()
	awaitQueued(t, s, 1)
	cancel()
	err := <-done
	require.ErrorIs(t, err, ErrOverCapacity)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "over capacity: held back behind 1 calls in flight")

	err = s.acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrOverCapacity, "nothing waited")
	s.release()
}
