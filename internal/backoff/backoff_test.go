package backoff_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/internal/backoff"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDelayDoublesToTheCap(t *testing.T) {
	p := backoff.Policy{Min: 5 * time.Millisecond, Max: time.Second}
	want := []time.Duration{5, 5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, p.Delay(i), "Delay(%d)", i)
	}
}

func TestDelaySaturatesInsteadOfOverflowing(t *testing.T) {
	p := backoff.Policy{Min: time.Second, Max: math.MaxInt64}
	assert.Equal(t, time.Duration(math.MaxInt64), p.Delay(200))
	p = backoff.Policy{Min: 3, Max: math.MaxInt64 - 1}
	assert.Equal(t, time.Duration(math.MaxInt64-1), p.Delay(200))
	assert.Equal(t, time.Duration(0), backoff.Policy{Min: 0, Max: 0}.Delay(5))
}

func TestDelayFromZeroMinStillGrows(t *testing.T) {
	p := backoff.Policy{Max: time.Second}
	assert.Equal(t, time.Duration(0), p.Delay(1))
	assert.Positive(t, p.Delay(3))
}

func TestJitterStaysInItsWindow(t *testing.T) {
	d := time.Second
	seenLow := false
	for range 1000 {
		j := backoff.Jitter(d, 0.5)
		require.GreaterOrEqual(t, j, d/2)
		require.LessOrEqual(t, j, d)
		seenLow = seenLow || j < 3*d/4
	}
	assert.True(t, seenLow, "jitter 0.5 never went below 3/4 of d in 1000 draws")
	assert.Equal(t, d, backoff.Jitter(d, 0))
	assert.Equal(t, d, backoff.Jitter(d, -1), "negative jitter is none")
	for range 100 {
		j := backoff.Jitter(d, 7) // clamped to full jitter
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.LessOrEqual(t, j, d)
	}
}

func TestBackoffNextAndReset(t *testing.T) {
	b := backoff.Backoff{Policy: backoff.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond}}
	got := []time.Duration{b.Next(), b.Next(), b.Next(), b.Next()}
	assert.Equal(t, []time.Duration{1, 2, 4, 4}, scale(got, time.Millisecond))
	b.Reset()
	assert.Equal(t, time.Millisecond, b.Next())
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

func TestDurationSaturates(t *testing.T) {
	assert.Equal(t, time.Duration(math.MaxInt64), backoff.Duration(math.MaxInt64))
	assert.Equal(t, time.Duration(math.MaxInt64), backoff.Duration(math.Inf(1)))
	assert.Equal(t, time.Duration(0), backoff.Duration(-5))
	assert.Equal(t, time.Duration(42), backoff.Duration(42))
}

func TestSleepWaitsOnTheClock(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(context.Background(), clk, time.Second) }()
	require.NoError(t, clk.WaitAdvance(time.Second, 10*time.Second, 1))
	assert.NoError(t, <-done)
}

func TestSleepEndsWithCtx(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(ctx, clk, time.Hour) }()
	select {
	case <-clk.Alarms(): // the timer is armed
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep never armed a timer")
	}
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.ErrorIs(t, backoff.Sleep(ctx, clk, 0), context.Canceled, "an ended ctx wins even for d ≤ 0")
	assert.NoError(t, backoff.Sleep(context.Background(), clk, 0))
}

func TestSleepUntil(t *testing.T) {
	clk := testclock.NewClock(time.Time{})
	stop := make(chan struct{})
	done := make(chan bool, 1)
	go func() { done <- backoff.SleepUntil(stop, clk, time.Second) }()
	require.NoError(t, clk.WaitAdvance(time.Second, 10*time.Second, 1))
	assert.True(t, <-done)

	go func() { done <- backoff.SleepUntil(stop, clk, time.Hour) }()
	select {
	case <-clk.Alarms():
	case <-time.After(10 * time.Second):
		t.Fatal("SleepUntil never armed a timer")
	}
	close(stop)
	assert.False(t, <-done)
	assert.False(t, backoff.SleepUntil(stop, clk, 0), "a closed done wins even for d ≤ 0")
}
