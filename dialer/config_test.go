package dialer_test

import (
	"testing"
	"time"

	"github.com/juju/clock"
	"github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/dialer"
)

func TestConfigValidate(t *testing.T) {
	peers := func() []string { return []string{"10.0.0.2:17070"} }
	tests := []struct {
		name    string
		cfg     dialer.Config
		wantErr string // "" means valid
	}{
		{"controller with defaults", dialer.Config{LocalPort: 17070, Remote: peers}, ""},
		{"single controller, no peers", dialer.Config{LocalPort: 17070}, ""},
		{"require local", dialer.Config{LocalPort: 17070, Policy: dialer.RequireLocal}, ""},
		{"prefer local", dialer.Config{LocalPort: 17070, Remote: peers, Policy: dialer.PreferLocal}, ""},
		{"agent without controller", dialer.Config{Remote: peers, Policy: dialer.PreferLocal}, ""},
		{"all knobs", dialer.Config{LocalPort: 1, Remote: peers, LocalReady: make(chan struct{}),
			LocalReadyGrace: time.Second, HeadStart: time.Millisecond, MinBackoff: time.Second,
			MaxBackoff: time.Second, Clock: clock.WallClock}, ""},
		{"max port", dialer.Config{LocalPort: 65535}, ""},

		{"zero policy without local port", dialer.Config{Remote: peers}, "Policy require-local-when-ready with LocalPort 0"},
		{"require local without local port", dialer.Config{Remote: peers, Policy: dialer.RequireLocal}, "Policy require-local with LocalPort 0"},
		{"nothing to dial", dialer.Config{Policy: dialer.PreferLocal}, "nil Remote with LocalPort 0"},
		{"negative port", dialer.Config{LocalPort: -1}, "LocalPort -1"},
		{"port too big", dialer.Config{LocalPort: 65536}, "LocalPort 65536"},
		{"unknown policy", dialer.Config{LocalPort: 1, Policy: 7}, "Policy Policy(7)"},
		{"negative grace", dialer.Config{LocalPort: 1, LocalReadyGrace: -1}, "LocalReadyGrace -1ns (must be positive"},
		{"negative head start", dialer.Config{LocalPort: 1, HeadStart: -1}, "HeadStart -1ns (must be positive"},
		{"negative min backoff", dialer.Config{LocalPort: 1, MinBackoff: -1}, "MinBackoff -1ns (must be positive"},
		{"negative max backoff", dialer.Config{LocalPort: 1, MaxBackoff: -1}, "MaxBackoff -1ns (must be positive"},
		{"min above max", dialer.Config{LocalPort: 1, MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, "MinBackoff 2s (must be at most MaxBackoff 1s)"},
		{"min above default max", dialer.Config{LocalPort: 1, MinBackoff: time.Minute}, "MinBackoff 1m0s (must be at most MaxBackoff 5s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			d, newErr := dialer.New(tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, newErr)
				require.NotNil(t, d)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, errors.NotValid), "%v does not match errors.NotValid", err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.True(t, errors.Is(newErr, errors.NotValid), "New: %v", newErr)
			assert.Nil(t, d)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	got := dialer.Defaults(dialer.Config{LocalPort: 1})
	assert.Equal(t, dialer.RequireLocalWhenReady, got.Policy, "the zero Policy is RequireLocalWhenReady")
	assert.Equal(t, 3*time.Second, got.LocalReadyGrace)
	assert.Equal(t, 250*time.Millisecond, got.HeadStart)
	assert.Equal(t, 50*time.Millisecond, got.MinBackoff)
	assert.Equal(t, 5*time.Second, got.MaxBackoff)
	assert.Equal(t, clock.WallClock, got.Clock)
	assert.NotNil(t, got.DialContext)
	assert.Nil(t, got.LocalReady, "nil LocalReady stays nil: never ready")
}

func TestPolicyString(t *testing.T) {
	assert.Equal(t, "require-local-when-ready", dialer.RequireLocalWhenReady.String())
	assert.Equal(t, "prefer-local", dialer.PreferLocal.String())
	assert.Equal(t, "require-local", dialer.RequireLocal.String())
	assert.Equal(t, "Policy(-2)", dialer.Policy(-2).String())
	var zero dialer.Policy
	assert.Equal(t, dialer.RequireLocalWhenReady, zero)
}

func TestBackoffIsJitteredDoublingAndCapped(t *testing.T) {
	d := mustNew(t, dialer.Config{LocalPort: 1, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	ceilings := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for round, ceiling := range ceilings {
		ceiling *= time.Millisecond
		seen := map[time.Duration]bool{}
		for range 200 {
			b := d.Backoff(round)
			require.GreaterOrEqual(t, b, ceiling/2, "round %d", round)
			require.LessOrEqual(t, b, ceiling, "round %d", round)
			seen[b] = true
		}
		assert.Greater(t, len(seen), 1, "round %d: no jitter", round)
	}
	// A huge round count neither overflows nor exceeds the cap.
	b := d.Backoff(1 << 20)
	assert.True(t, b >= 500*time.Millisecond && b <= time.Second, "round 2^20: %v", b)

	huge := mustNew(t, dialer.Config{LocalPort: 1, MinBackoff: time.Hour, MaxBackoff: 1<<63 - 1})
	for round := range 100 {
		require.Greater(t, huge.Backoff(round), time.Duration(0), "round %d overflowed", round)
	}
}

func TestLocalAddressesAreLiteralLoopback(t *testing.T) {
	d := mustNew(t, dialer.Config{LocalPort: 17070})
	assert.Equal(t, []string{"127.0.0.1:17070", "[::1]:17070"}, d.LocalAddrs())
	none := mustNew(t, dialer.Config{Remote: func() []string { return nil }, Policy: dialer.PreferLocal})
	assert.Empty(t, none.LocalAddrs())
}
