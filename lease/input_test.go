package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

// The answers of package lease to careless and hostile input (issue 31):
// nil functions, timings no store can keep, names that are huge or carry
// control characters, store errors that carry newlines.

// leadResult is what a call of Lead or WithLeadership did: returned err,
// or panicked with panicked.
type leadResult struct {
	err      error
	panicked any
}

// callLead runs call in a goroutine, recovering a panic, and returns the
// channel its result comes on.
func callLead(call func() error) <-chan leadResult {
	out := make(chan leadResult, 1)
	go func() {
		var res leadResult
		defer func() {
			res.panicked = recover()
			out <- res
		}()
		res.err = call()
	}()
	return out
}

// TestNilLeaderFuncIsRefusedAtTheCall: Lead(ctx, nil) and
// WithLeadership(ctx, nil) answer NotValid at once, also on a follower,
// and never panic later, at the moment the tracker first holds the lease
// (before, a follower ran for hours and crashed when it became leader).
func TestNilLeaderFuncIsRefusedAtTheCall(t *testing.T) {
	clk := testclock.NewClock(t0)
	mem := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	other, err := mem.Claim(context.Background(), "singular", "unit-1", 2*dur)
	require.NoError(t, err)
	tr, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
		Store: mem, Name: "singular", Holder: "unit-0", Duration: dur, Clock: clk,
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	awaitState(t, tr, lease.NotHeld)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lead := callLead(func() error { return tr.Lead(ctx, nil) })
	once := callLead(func() error { return tr.WithLeadership(ctx, nil) })
	// A follower: neither call may wait for the lease to say so.
	wantNilRefused := func(what string, res leadResult) {
		t.Helper()
		require.Nil(t, res.panicked, "%s panicked", what)
		require.ErrorIs(t, res.err, jujuerrors.NotValid, "%s", what)
		assert.ErrorContains(t, res.err, "nil")
		assert.ErrorContains(t, res.err, `lease "singular"`)
	}
	select {
	case res := <-lead:
		wantNilRefused("Lead(ctx, nil) on a follower", res)
	case <-time.After(wait):
		// The old code waits here for the lease: show what it does once
		// this follower leads.
		require.NoError(t, mem.Revoke(context.Background(), other))
		awaitState(t, tr, lease.Held)
		select {
		case res := <-lead:
			t.Fatalf("Lead(ctx, nil) did not answer while a follower; at the first Held it returned %v, panicked: %v",
				res.err, res.panicked)
		case <-time.After(wait):
			t.Fatal("Lead(ctx, nil) did not answer, as a follower nor as the leader")
		}
	}
	wantNilRefused("WithLeadership(ctx, nil) on a follower", <-once)

	// The leader: refused the same way, without a run.
	require.NoError(t, mem.Revoke(context.Background(), other))
	awaitState(t, tr, lease.Held)
	wantNilRefused("Lead(ctx, nil) on the leader", <-callLead(func() error { return tr.Lead(ctx, nil) }))
	wantNilRefused("WithLeadership(ctx, nil) on the leader",
		<-callLead(func() error { return tr.WithLeadership(ctx, nil) }))
	st, err := tr.Check(ctx, 0)
	require.NoError(t, err, "the tracker leads on, untouched")
	assert.Equal(t, lease.Held, st.State)
}

// awaitState follows tr's status until it is s.
func awaitState(t *testing.T, tr *lease.Tracker, s lease.State) lease.Status {
	t.Helper()
	for {
		st, changed := tr.Current()
		if st.State == s {
			return st
		}
		select {
		case <-changed:
		case <-time.After(wait):
			t.Fatalf("the tracker never came to %v (now %+v)", s, st)
		}
	}
}

// TestConfigValidateBoundsTimings: every timing a Config sets has a floor
// no store is asked to go below, and the refusal names the field, the
// value and the rule (before, Duration 1µs passed and the tracker made
// ~40,000 store calls a second).
func TestConfigValidateBoundsTimings(t *testing.T) {
	valid := lease.Config{Name: "n", Holder: "h", Duration: dur}
	for _, tc := range []struct {
		name string
		mod  func(*lease.Config)
		want string // "" for valid
	}{
		{"Duration 1µs", func(c *lease.Config) { c.Duration = time.Microsecond },
			"Duration 1µs (must be at least 100ms"},
		{"Duration 1ns", func(c *lease.Config) { c.Duration = 1 },
			"Duration 1ns (must be at least 100ms"},
		{"Duration just below the floor", func(c *lease.Config) { c.Duration = 100*time.Millisecond - 1 },
			"Duration 99.999999ms (must be at least 100ms"},
		{"Duration 0", func(c *lease.Config) { c.Duration = 0 },
			"Duration 0s (must be at least 100ms"},
		{"Duration negative", func(c *lease.Config) { c.Duration = -time.Second },
			"Duration -1s (must be at least 100ms"},
		{"Duration at the floor", func(c *lease.Config) { c.Duration = 100 * time.Millisecond }, ""},
		{"Duration at the floor, every default", func(c *lease.Config) {
			*c = lease.Config{Name: "n", Holder: "h", Duration: 100 * time.Millisecond}
		}, ""},
		{"Margin 1ns", func(c *lease.Config) { c.Margin = 1 },
			"Margin 1ns (must be in [10ms, Duration=30s), or 0 for the default Duration/10)"},
		{"Margin just below the floor", func(c *lease.Config) { c.Margin = 10*time.Millisecond - 1 },
			"Margin 9.999999ms (must be in [10ms, Duration=30s), or 0 for the default Duration/10)"},
		{"Margin at the floor", func(c *lease.Config) { c.Margin = 10 * time.Millisecond }, ""},
		{"Margin of Duration", func(c *lease.Config) { c.Margin = dur },
			"Margin 30s (must be in [10ms, Duration=30s), or 0 for the default Duration/10)"},
		{"Margin negative", func(c *lease.Config) { c.Margin = -1 },
			"Margin -1ns (must be in [10ms, Duration=30s), or 0 for the default Duration/10)"},
		{"ClaimInterval 1ns", func(c *lease.Config) { c.ClaimInterval = 1 },
			"ClaimInterval 1ns (must be in [10ms, Duration=30s], or 0 for the default Duration/10)"},
		{"ClaimInterval just below the floor", func(c *lease.Config) { c.ClaimInterval = 10*time.Millisecond - 1 },
			"ClaimInterval 9.999999ms (must be in [10ms, Duration=30s], or 0 for the default Duration/10)"},
		{"ClaimInterval at the floor", func(c *lease.Config) { c.ClaimInterval = 10 * time.Millisecond }, ""},
		{"ClaimInterval of Duration", func(c *lease.Config) { c.ClaimInterval = dur }, ""},
		{"ClaimInterval above Duration", func(c *lease.Config) { c.ClaimInterval = dur + 1 },
			"ClaimInterval 30.000000001s (must be in [10ms, Duration=30s], or 0 for the default Duration/10)"},
		{"RenewFraction tiny", func(c *lease.Config) { c.RenewFraction = 1e-12 },
			"RenewFraction 1e-12 (must be in [0.01, 1), or 0 for the default 0.5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.mod(&cfg)
			err := cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				assert.NotZero(t, cfg.Timing(), "a valid Config has its Timing")
				return
			}
			require.ErrorIs(t, err, jujuerrors.NotValid)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, cfg.Timing(), "an invalid Config has no Timing")
		})
	}
}

// TestTimingFloorBoundsTheCallRate: at the floors, with the most frequent
// renewals allowed, a tracker's store calls stay ~1ms apart at the least —
// the waits every timing derives from Duration — not the µs of a spin.
func TestTimingFloorBoundsTheCallRate(t *testing.T) {
	cfg := lease.Config{Name: "n", Holder: "h", Duration: 100 * time.Millisecond,
		Margin: 100*time.Millisecond - time.Nanosecond, RenewFraction: 0.01, ClaimInterval: 10 * time.Millisecond}
	require.NoError(t, cfg.Validate())
	tm := cfg.Timing()
	assert.Less(t, tm.RenewRate/1000, 1100.0, "renewal calls/s of one lease at the floors: %v", tm)
	assert.LessOrEqual(t, tm.ClaimRate, 1/(0.01*0.95)+1, "claim calls/s of one polling follower at the floors: %v", tm)
}

// TestConfigValidateBoundsNames: a Name or Holder is 1 to 253 bytes of
// UTF-8 without control characters, and a refusal shows at most 64 bytes
// of the value, quoted — never a megabyte.
func TestConfigValidateBoundsNames(t *testing.T) {
	valid := lease.Config{Name: "n", Holder: "h", Duration: dur}
	long := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name  string
		value string
		want  string // "" for valid
	}{
		{"empty", "", "empty %s (must be 1 to 253 bytes of UTF-8 text without control characters)"},
		{"one byte", "a", ""},
		{"253 bytes", strings.Repeat("a", 253), ""},
		{"253 bytes of non-ASCII", strings.Repeat("ü", 126) + "a", ""},
		{"254 bytes", strings.Repeat("a", 254),
			`%s "` + strings.Repeat("a", 64) + `"… (254 bytes) (must be at most 253 bytes)`},
		{"a megabyte", long, `%s "` + strings.Repeat("x", 64) + `"… (1048576 bytes) (must be at most 253 bytes)`},
		{"a megabyte of ü, cut on a rune", "a" + strings.Repeat("ü", 1<<19), // byte 64 is the middle of a ü
			`%s "a` + strings.Repeat("ü", 31) + `"… (1048577 bytes) (must be at most 253 bytes)`},
		{"a megabyte of continuation bytes", strings.Repeat("\x80", 1<<20),
			`%s "` + strings.Repeat(`\x80`, 61) + `"… (1048576 bytes) (must be at most 253 bytes)`},
		{"a newline", "unit-0\n[+]forged ok", `%s "unit-0\n[+]forged ok" (must have no control characters: U+000A at byte 6)`},
		{"a tab", "a\tb", `%s "a\tb" (must have no control characters: U+0009 at byte 1)`},
		{"NUL", "a\x00", `%s "a\x00" (must have no control characters: U+0000 at byte 1)`},
		{"DEL", "a\x7f", `%s "a\x7f" (must have no control characters: U+007F at byte 1)`},
		{"C1", "a\u0085", `%s "a\u0085" (must have no control characters: U+0085 at byte 1)`},
		{"line separator", "a\u2028b", `%s "a\u2028b" (must have no control characters: U+2028 at byte 1)`},
		{"invalid UTF-8", "a\xffb", `%s "a\xffb" (must be valid UTF-8)`},
		{"a space", "unit 0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, field := range []string{"Name", "Holder"} {
				cfg := valid
				if field == "Name" {
					cfg.Name = tc.value
				} else {
					cfg.Holder = tc.value
				}
				err := cfg.Validate()
				if tc.want == "" {
					require.NoError(t, err, field)
					continue
				}
				require.ErrorIs(t, err, jujuerrors.NotValid, field)
				assert.Equal(t, fmt.Sprintf(tc.want, field)+" not valid", err.Error(), field)
				assert.Less(t, len(err.Error()), 400, "%s: the refusal stays short", field)
				_, err = lease.NewTracker(lease.Config{Store: leasestore.NewMemStore(leasestore.MemStoreConfig{}),
					Name: cfg.Name, Holder: cfg.Holder, Duration: dur})
				require.ErrorIs(t, err, jujuerrors.NotValid, field)
			}
		})
	}
}

// TestMemStoreRefusesBadNames: MemStore, as a store, refuses the names and
// holders a Config refuses, with the same rule, at every call that takes
// them, and the refused claim leaves the lease free.
func TestMemStoreRefusesBadNames(t *testing.T) {
	ctx := context.Background()
	m := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: testclock.NewClock(t0)})
	long := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Claim, empty name", func() error { _, err := m.Claim(ctx, "", "a", time.Minute); return err },
			"empty lease name (must be 1 to 253 bytes"},
		{"Claim, empty holder", func() error { _, err := m.Claim(ctx, "l", "", time.Minute); return err },
			"empty holder (must be 1 to 253 bytes"},
		{"Claim, huge name", func() error { _, err := m.Claim(ctx, long, "a", time.Minute); return err },
			`lease name "` + strings.Repeat("x", 64) + `"… (1048576 bytes) (must be at most 253 bytes)`},
		{"Claim, huge holder", func() error { _, err := m.Claim(ctx, "l", long, time.Minute); return err },
			`holder "` + strings.Repeat("x", 64) + `"… (1048576 bytes) (must be at most 253 bytes)`},
		{"Claim, holder with a newline", func() error { _, err := m.Claim(ctx, "l", "a\nb", time.Minute); return err },
			`holder "a\nb" (must have no control characters`},
		{"Extend, huge name", func() error {
			_, err := m.Extend(ctx, leasestore.Grant{Name: long, Holder: "a", Token: 1}, time.Minute)
			return err
		}, `lease name "` + strings.Repeat("x", 64) + `"… (1048576 bytes)`},
		{"Extend, huge holder", func() error {
			_, err := m.Extend(ctx, leasestore.Grant{Name: "l", Holder: long, Token: 1}, time.Minute)
			return err
		}, `holder "` + strings.Repeat("x", 64) + `"… (1048576 bytes)`},
		{"Revoke, huge name", func() error { return m.Revoke(ctx, leasestore.Grant{Name: long, Holder: "a", Token: 1}) },
			`lease name "` + strings.Repeat("x", 64) + `"… (1048576 bytes)`},
		{"Holder, huge name", func() error { _, err := m.Holder(ctx, long); return err },
			`lease name "` + strings.Repeat("x", 64) + `"… (1048576 bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, jujuerrors.NotValid)
			assert.NotErrorIs(t, err, leasestore.ErrHeld)
			assert.NotErrorIs(t, err, leasestore.ErrNotHeld)
			assert.ErrorContains(t, err, tc.want)
			assert.Less(t, len(err.Error()), 400, "the refusal stays short")
		})
	}
	err, ok := <-m.WatchRelease(ctx, nil)
	require.True(t, ok, "a watch of nil yields its error")
	require.ErrorIs(t, err, jujuerrors.NotValid, "a watch of nil")
	g, err := m.Claim(ctx, "l", "a", time.Minute)
	require.NoError(t, err, "the refused claims left the lease free")
	assert.Equal(t, uint64(1), g.Token, "no refused claim took a token")
}

// errStore answers every Claim with err.
type errStore struct {
	leasestore.Store
	err error
}

func (s errStore) Claim(context.Context, string, string, time.Duration) (leasestore.Grant, error) {
	return leasestore.Grant{}, s.err
}

// TestDetailIsOneLine: the tracker's Detail, which a readiness board shows
// as one line of /readyz, stays one line, and short, whatever text the
// store's error carries: its control characters are escaped, and a
// megabyte is cut (before, a newline in a store's error wrote a forged
// "[+]forged ok" line).
func TestDetailIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		state lease.State
		want  string
	}{
		{"ambiguous", errors.New("boom\n[+]forged ok\r\x00\u0085\u2028\xff"), lease.Unknown,
			"unknown: claim not confirmed: boom␊[+]forged ok␍␀\ufffd\ufffd\ufffd"},
		{"definitive", fmt.Errorf("%w\n[+]forged ok", leasestore.ErrHeld), lease.NotHeld,
			"not-held: not the leader: lease held by another holder␊[+]forged ok"},
		{"a megabyte", errors.New(strings.Repeat("y", 1<<20)), lease.Unknown,
			"unknown: claim not confirmed: " + strings.Repeat("y", 1024-len("unknown: claim not confirmed: …")) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.NewClock(t0)
			tr, err := lease.NewTracker(lease.WithoutJitterForTest(lease.Config{
				Store: errStore{err: tc.err}, Name: "singular", Holder: "unit-0", Duration: dur, Clock: clk,
			}))
			require.NoError(t, err)
			t.Cleanup(func() { _ = tr.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			r, err := leasetest.Settle(ctx, tr, clk, 1)
			require.NoError(t, err)
			require.Equal(t, tc.state, r.State)
			d := tr.Detail()
			assert.Equal(t, tc.want, d)
			assert.NotContains(t, d, "\n")
			assert.LessOrEqual(t, len(d), 1100)
		})
	}
}

// TestCheckCutOffSaysWhatTheStoreAnswered: a Check whose ctx ends while it
// waits for the store still says what the store last answered, not only
// that the wait ended (issue 31: 10,000 trackers on one etcd member each
// said "waiting for the store: context canceled", though the store had
// answered "over capacity").
func TestCheckCutOffSaysWhatTheStoreAnswered(t *testing.T) {
	clk := testclock.NewClock(t0)
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	store.Always(leasetest.OpClaim, leasetest.Timeout)
	tr, err := lease.NewTracker(lease.Config{Store: store, Name: "singular", Holder: "unit-0", Duration: dur, Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = leasetest.Settle(ctx, tr, clk, 1) // the claim answered ambiguously
	require.NoError(t, err)

	store.Always(leasetest.OpClaim, leasetest.Hang) // the next claim, which the Check asks for, never answers
	cut, cutOff := context.WithCancel(ctx)
	cutOff()
	st, err := tr.Check(cut, 0)
	assert.Equal(t, lease.Unknown, st.State)
	assert.ErrorIs(t, err, context.Canceled, "the wait ended")
	assert.ErrorIs(t, err, lease.ErrRenewalFailed, "the answer so far")
	assert.ErrorIs(t, err, leasetest.ErrInjectedTimeout, "what the store said")
	assert.ErrorContains(t, err, "waiting for the store: context canceled; so far: ")
}
