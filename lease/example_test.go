package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
)

func ExampleTracker_Check() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.NewClock(start)
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	cfg := lease.Config{Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk}
	leader, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer leader.Close()

	// Is this unit leader for at least 30 s? (The first check waits for
	// the claim.)
	st, err := leader.Check(context.Background(), 30*time.Second)
	fmt.Println(st.State, st.Holder, "token", st.Token, "for", st.Until.Sub(start), err)

	cfg.Holder = "unit-1"
	follower, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer follower.Close()
	st, err = follower.Check(context.Background(), 30*time.Second)
	fmt.Println(st.State, errors.Is(err, lease.ErrNotLeader), err)
	// Output:
	// held unit-0 token 1 for 57s <nil>
	// not-held true lease "singular": not the leader: held by "unit-0"
}

// The incident: a check lands at renewal time while the lease back end
// times out. The answer is "renewal not confirmed, still held for 28 s",
// not "not the leader".
func ExampleTracker_Check_renewalTimeout() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Check(ctx, 30*time.Second); err != nil {
		panic(err)
	}

	store.Always(leasetest.OpExtend, leasetest.Timeout)
	clk.Advance(28 * time.Second) // about when the renewal is due
	st, err := tr.Check(ctx, 30*time.Second)
	fmt.Println("state:", st.State)
	fmt.Println("renewal failed:", errors.Is(err, lease.ErrRenewalFailed))
	fmt.Println("not leader:", errors.Is(err, lease.ErrNotLeader))
	fmt.Println("still ours for:", st.Until.Sub(clk.Now()))
	// Output:
	// state: held
	// renewal failed: true
	// not leader: false
	// still ours for: 29s
}

// WithLeadership runs leader work with a ctx that ends when the lease can
// no longer be promised. Here another party ends the term (an operator's
// revoke; on etcd, a deleted key): the store, a LossNotifier, tells the
// tracker at once, the tracker confirms the loss with the store, and ctx
// ends — without waiting for the next scheduled renewal.
func ExampleTracker_WithLeadership() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()

	err = tr.WithLeadership(context.Background(), func(ctx context.Context) error {
		st, _ := tr.Check(ctx, 0)
		fmt.Println("leading with fencing token", st.Token)

		term := leasestore.Grant{Name: "singular", Holder: "unit-0", Token: st.Token}
		if err := store.Revoke(context.Background(), term); err != nil {
			return err
		}
		<-ctx.Done()
		fmt.Println("stopped:", errors.Is(context.Cause(ctx), lease.ErrNotLeader))
		return ctx.Err()
	})
	fmt.Println("WithLeadership:", errors.Is(err, lease.ErrNotLeader))
	fmt.Println("clock moved:", clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	// Output:
	// leading with fencing token 1
	// stopped: true
	// WithLeadership: true
	// clock moved: 0s
}

// Lead is the leadership loop: it runs fn each time the tracker holds the
// lease, and fn's ctx ends when the promise does. Here the term is revoked
// behind the leader's back; fn stops, the tracker claims a new term, and
// fn runs again under the new token.
func ExampleTracker_Lead() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()

	ctx, cancel := context.WithCancel(context.Background())
	terms := make(chan lease.Status)
	done := make(chan error)
	go func() {
		done <- tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
			fmt.Println("leading with token", st.Token)
			terms <- st
			<-ctx.Done() // real work stops here too, and passes st.Token on
			fmt.Println("stopped, not leader:", errors.Is(context.Cause(ctx), lease.ErrNotLeader))
			return ctx.Err()
		})
	}()

	st := <-terms
	_ = store.Revoke(ctx, leasestore.Grant{Name: "singular", Holder: "unit-0", Token: st.Token})
	for st, changed := tr.Current(); st.State == lease.Held; st, changed = tr.Current() {
		<-changed // follow the status until the tracker has learned of the loss
	}
	if _, err := leasetest.Step(ctx, tr, clk); err != nil { // on to its next claim
		panic(err)
	}
	<-terms
	cancel()
	fmt.Println("Lead:", <-done)
	// Output:
	// leading with token 1
	// stopped, not leader: true
	// leading with token 2
	// stopped, not leader: false
	// Lead: context canceled
}

// StepDown hands leadership over without exiting: the leader stops leading
// at once, releases the lease once its Lead function has returned, and
// stays a follower that reports the new holder.
func ExampleTracker_StepDown() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	cfg := lease.Config{Store: store, Name: "singular", Duration: 30 * time.Second, Clock: clk}
	cfg.Holder = "unit-0"
	a, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer a.Close()
	ctx := context.Background()
	if _, err := a.Check(ctx, 0); err != nil {
		panic(err)
	}
	cfg.Holder = "unit-1"
	b, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if _, err := b.Check(ctx, 0); !errors.Is(err, lease.ErrNotLeader) {
		panic(err)
	}

	fmt.Println("step down:", a.StepDown(ctx))
	// The store tells b of the release (MemStore is a ReleaseWatcher): b
	// claims within 1ms, not at its next poll.
	st, changed := b.Current()
	for st.State != lease.Held {
		select {
		case <-changed:
		case <-clk.Alarms(): // b's short random delay before it claims
			clk.Advance(5 * time.Millisecond)
		}
		st, changed = b.Current()
	}
	fmt.Println("now leading:", st.Holder, "token", st.Token)
	for {
		r, err := leasetest.Step(ctx, a, clk) // a claims again after one Duration
		if err != nil {
			panic(err)
		}
		if r.Holder != "" {
			fmt.Println("unit-0 follows:", r.State, r.Holder)
			break
		}
	}
	// Output:
	// step down: <nil>
	// now leading: unit-1 token 2
	// unit-0 follows: not-held unit-1
}

// Alive is for /livez: it fails only when the tracker itself is stuck, never
// because the store is down or another holder leads — a restart would not
// fix those. Readiness asks Check.
func ExampleTracker_Alive() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	livez := func(w http.ResponseWriter, _ *http.Request) {
		if err := tr.Alive(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}
	ctx := context.Background()
	if _, err := tr.Check(ctx, 0); err != nil {
		panic(err)
	}

	store.Always(leasetest.OpExtend, leasetest.Timeout) // the store is down
	for range 20 {
		if _, err := leasetest.Step(ctx, tr, clk); err != nil {
			panic(err)
		}
	}
	rec := httptest.NewRecorder()
	livez(rec, httptest.NewRequest("GET", "/livez", nil))
	fmt.Println("livez:", rec.Code)
	_, err = tr.Check(ctx, 0)
	fmt.Println("ready:", err == nil, errors.Is(err, lease.ErrRenewalFailed))
	// Output:
	// livez: 200
	// ready: false true
}

// A TokenGuard at the resource refuses a paused leader's late write: by
// the time it wakes, its successor's newer token has been admitted.
func ExampleTokenGuard() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	ctx := context.Background()
	var guard lease.TokenGuard // kept by the resource, e.g. beside a file
	write := func(who string, token uint64) {
		if err := guard.Admit(token); err != nil {
			fmt.Println(who, "refused:", errors.Is(err, lease.ErrStaleToken), err)
			return
		}
		fmt.Println(who, "wrote with token", token)
	}

	a, _ := store.Claim(ctx, "singular", "unit-0", time.Minute)
	write("unit-0", a.Token)
	clk.Advance(2 * time.Minute) // unit-0 is paused (a GC stall, a frozen VM) past its term
	b, _ := store.Claim(ctx, "singular", "unit-1", time.Minute)
	write("unit-1", b.Token)
	write("unit-0", a.Token) // unit-0 wakes up and finishes its write
	// Output:
	// unit-0 wrote with token 1
	// unit-1 wrote with token 2
	// unit-0 refused: true fencing token 1 refused: token 2 was admitted, so its holder has been deposed
}

// With a Logger, the tracker writes one record per change of its state —
// here a claim, a renewal the store could not confirm, its confirmation on
// the retry, and Close — and none for routine renewals. Every store counts
// its calls the same way, in a StoreReport.
func ExampleConfig_logger() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	}))
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk, Logger: logger,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	calls := uint64(1)
	// advance moves the clock by d, at least the wait before the next
	// store call (a call comes early by a random share of its wait, never
	// late), so that the call goes at a time the output can show.
	advance := func(d time.Duration) {
		clk.Advance(d)
		calls++
		if _, err := leasetest.Settle(ctx, tr, clk, calls); err != nil {
			panic(err)
		}
	}
	if _, err := leasetest.Settle(ctx, tr, clk, 1); err != nil {
		panic(err)
	}
	advance(28500 * time.Millisecond) // a routine renewal, at half the validity: no record
	store.Next(leasetest.OpExtend, leasetest.AppliedTimeout)
	advance(28500 * time.Millisecond) // the renewal is not confirmed
	advance(375 * time.Millisecond)   // the retry (after Duration/80) confirms it
	if err := tr.Close(); err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", store.StoreReport())
	// Output:
	// level=INFO msg="lease held" lease=singular state=held holder=unit-0 token=1 until=2026-01-01T00:00:57.000Z latency=0s
	// level=WARN msg="lease renewal not confirmed" lease=singular state=held holder=unit-0 token=1 until=2026-01-01T00:01:25.500Z err="leasetest: injected lease operation timeout" latency=0s
	// level=INFO msg="lease confirmed again" lease=singular state=held holder=unit-0 token=1 until=2026-01-01T00:01:54.375Z latency=0s
	// level=INFO msg="lease tracker closed" lease=singular state=not-held token=1
	// {Claim:{OK:1 Definitive:0 NotSent:0 Ambiguous:0} Extend:{OK:2 Definitive:0 NotSent:0 Ambiguous:1} Revoke:{OK:0 Definitive:0 NotSent:0 Ambiguous:0} InFlight:0}
}

// A Tracker has gate.Component's shape, so a readiness board follows it
// with board.Follow("lease", tr): the entry opens once the tracker knows
// who leads and, while it does not, says why in the tracker's words. Here
// a local interface of the same shape stands for the board, and the
// store's first claim times out.
func ExampleTracker_Detail() {
	type component interface {
		Completed() <-chan struct{}
		Failed() <-chan struct{}
		Cause() error
		Detail() string
	}
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}),
		leasetest.FaultStoreConfig{Clock: clk})
	store.Next(leasetest.OpClaim, leasetest.Timeout)
	tr, err := lease.NewTracker(lease.Config{
		Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk,
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var c component = tr
	if _, err := leasetest.Settle(ctx, tr, clk, 1); err != nil { // the first claim, answered
		panic(err)
	}
	fmt.Println("locked:", c.Detail())
	if _, err := leasetest.Step(ctx, tr, clk); err != nil { // its retry
		panic(err)
	}
	select {
	case <-c.Completed():
		st, _ := tr.Current()
		fmt.Println("open: the tracker knows:", st.State)
	case <-c.Failed():
		fmt.Println("failed:", c.Cause())
	case <-ctx.Done():
		fmt.Println("still locked:", c.Detail())
	}
	// Output:
	// locked: unknown: claim not confirmed: leasetest: injected lease operation timeout
	// open: the tracker knows: held
}

// Check answers in three ways, and each says what to do: a leader acts
// until Until, a follower follows, and an unconfirmed renewal is Held only
// until the validity it had.
func ExampleTracker_Check_answers() {
	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	cfg := lease.Config{Store: store, Name: "singular", Holder: "unit-0", Duration: 30 * time.Second, Clock: clk}
	leader, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer leader.Close()
	ctx := context.Background()
	answer := func(tr *lease.Tracker) {
		st, err := tr.Check(ctx, 30*time.Second)
		switch {
		case err == nil: // leader until at least st.Until; fence with st.Token
			fmt.Println("leader until", st.Until.Sub(clk.Now()), "with token", st.Token)
		case errors.Is(err, lease.ErrNotLeader): // definitive: err names the holder
			fmt.Println("follower:", err)
		case errors.Is(err, lease.ErrRenewalFailed): // ambiguous: Held until st.Until, then Unknown
			fmt.Println("unconfirmed:", st.State, "for", st.Until.Sub(clk.Now()))
		}
	}
	answer(leader) // the first check waits for the claim
	cfg.Holder = "unit-1"
	follower, err := lease.NewTracker(cfg)
	if err != nil {
		panic(err)
	}
	defer follower.Close()
	answer(follower)
	store.Always(leasetest.OpExtend, leasetest.Timeout) // the store stops answering renewals
	clk.Advance(28 * time.Second)
	answer(leader)
	// Output:
	// leader until 57s with token 1
	// follower: lease "singular": not the leader: held by "unit-0"
	// unconfirmed: held for 29s
}
