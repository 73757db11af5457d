package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// Harness is what a Store's test gives the contract test.
type Harness struct {
	// Store is the store under test. Each subtest uses lease names of its
	// own, so one store (or one back end) may serve every subtest.
	Store leasestore.Store
	// Advance makes at least d pass as the store sees it (testclock
	// Advance for MemStore, a real wait for etcd).
	Advance func(d time.Duration)
	// Term is the duration the contract test claims for; choose it so
	// Advance(2*Term) is cheap (etcd: 1s).
	Term time.Duration
}

// RunStoreContract runs the leasestore.Store contract against the store that
// setup returns, one subtest per rule. setup is called once per subtest.
//
// The contract, which every Store must keep:
//   - Claim of a free lease succeeds with Token > 0, the Name and Holder
//     asked for, and Duration ≥ the duration requested.
//   - Claim while a term is live returns a *leasestore.HeldError naming the
//     holder (matching leasestore.ErrHeld), also when the claimant uses the same
//     holder name: a restarted process must wait for the term to end, or
//     revoke it, and then gets a new token.
//   - Extend of the live term succeeds with the same token and Duration ≥
//     the duration requested.
//   - Extend with a stale or foreign token returns a *leasestore.NotHeldError
//     (matching leasestore.ErrNotHeld) naming the lease and that token, even for
//     the same holder name; once another term is live, it names that
//     term's holder.
//   - Revoke then Extend returns ErrNotHeld; a second Revoke returns
//     ErrNotHeld.
//   - After Revoke, or after a term nobody extends has run its Duration,
//     another holder's Claim succeeds with a strictly larger token.
//   - Concurrent claims of a free lease have exactly one winner; the others
//     get a *HeldError naming it.
//   - A call with a cancelled ctx either succeeds (the store applied it)
//     or returns an error that is neither ErrHeld nor ErrNotHeld: a
//     cancelled call is ambiguous, never a definitive denial.
//   - Claim refuses an empty name or holder, one with a newline, and one
//     of a megabyte with a NotValid error (github.com/juju/errors), neither
//     ErrHeld nor ErrNotHeld, whose text is one line of less than 1 KiB
//     (it never echoes the megabyte), and takes nothing: the lease is
//     still free.
//   - Claim admits every holder a lease.Config admits (1 to 253 bytes of
//     UTF-8 text), and a name of 253 bytes of lower-case letters, digits
//     and '-' (a Kubernetes object name too).
//
// If the store is also a leasestore.LossNotifier: Lost stays open while the term
// is extended, and closes (within a few seconds of real time) when the term
// is revoked or expires, and at once for a term already over.
//
// If the store is also a leasestore.ReleaseWatcher: every HeldError names the
// live term (Token, Holder); WatchRelease of it yields nothing while the
// term is extended, and yields nil (within a few seconds of real time)
// when the term is revoked or expires — and for a term already over when
// the watch begins, also when another term has begun since, so that a
// release between a refused claim and its watch is never missed.
func RunStoreContract(t *testing.T, setup func(t *testing.T) Harness) {
	t.Helper()
	if setup == nil {
		t.Fatal("leasetest: RunStoreContract needs a setup func, got nil")
	}
	for _, c := range contractCases {
		t.Run(c.name, func(t *testing.T) {
			h := setup(t)
			if h.Store == nil || h.Advance == nil || h.Term <= 0 {
				t.Fatalf("leasetest: Harness needs a Store, an Advance func and a positive Term, got %+v", h)
			}
			c.run(t, h, "contract-"+strings.ToLower(c.name))
		})
	}
}

var contractCases = []struct {
	name string
	run  func(t *testing.T, h Harness, name string)
}{
	{"ClaimFreeLease", testClaimFreeLease},
	{"ClaimWhileHeldNamesHolder", testClaimWhileHeldNamesHolder},
	{"ClaimWhileHeldBySameHolderName", testClaimWhileHeldBySameHolderName},
	{"NamesAreIndependent", testNamesAreIndependent},
	{"ExtendLiveTermKeepsToken", testExtendLiveTermKeepsToken},
	{"ExtendForeignTokenIsNotHeld", testExtendForeignTokenIsNotHeld},
	{"ExtendOldTermOfSameHolderIsNotHeld", testExtendOldTermOfSameHolderIsNotHeld},
	{"RevokeThenExtendIsNotHeld", testRevokeThenExtendIsNotHeld},
	{"RevokeTwiceIsNotHeld", testRevokeTwiceIsNotHeld},
	{"ClaimAfterRevokeGetsLargerToken", testClaimAfterRevokeGetsLargerToken},
	{"UnextendedTermExpires", testUnextendedTermExpires},
	{"ConcurrentClaimsHaveOneWinner", testConcurrentClaimsHaveOneWinner},
	{"CancelledContextIsNeverDefinitive", testCancelledContextIsNeverDefinitive},
	{"ClaimRefusesBadNames", testClaimRefusesBadNames},
	{"ClaimAdmitsLongNames", testClaimAdmitsLongNames},
	{"LostClosesWhenTermIsRevoked", testLostClosesWhenTermIsRevoked},
	{"ReleaseWatchYieldsWhenTermIsRevoked", testReleaseWatchYieldsWhenTermIsRevoked},
}

// refusedFor claims name for holder, which must be refused by the live term
// of g, and returns the refusal. A ReleaseWatcher's must name that term.
func refusedFor(t *testing.T, h Harness, name, holder string, g leasestore.Grant) *leasestore.HeldError {
	t.Helper()
	_, err := h.Store.Claim(context.Background(), name, holder, h.Term)
	var held *leasestore.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Claim by %q while %q holds it: %v, want a *leasestore.HeldError", holder, g.Holder, err)
	}
	if held.Name != name || held.Holder != g.Holder || held.Token != g.Token {
		t.Fatalf("Claim by %q refused with %+v, want lease %q, holder %q, token %d (a ReleaseWatcher's HeldError names the term)",
			holder, *held, name, g.Holder, g.Token)
	}
	return held
}

// watchRelease returns the store's WatchRelease channel for held, or nil
// when the store is not a ReleaseWatcher. The watch ends with the test.
func watchRelease(t *testing.T, h Harness, held *leasestore.HeldError) <-chan error {
	t.Helper()
	w, ok := h.Store.(leasestore.ReleaseWatcher)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := w.WatchRelease(ctx, held)
	if ch == nil {
		t.Fatalf("WatchRelease(%+v) returned a nil channel", *held)
	}
	return ch
}

func wantReleased(t *testing.T, ch <-chan error, why string) {
	t.Helper()
	select {
	case err, ok := <-ch:
		if err != nil {
			t.Fatalf("the release watch failed after %s: %v", why, err)
		}
		if ok {
			if _, more := <-ch; more {
				t.Fatalf("the release watch yielded more than one value after %s", why)
			}
		}
	case <-time.After(lostWithin):
		t.Fatalf("the release watch yielded nothing %v after %s", lostWithin, why)
	}
}

// wantQuiet checks that the watch ch (what it is) has yielded nothing.
func wantQuiet[T any](t *testing.T, what string, ch <-chan T, why string) {
	t.Helper()
	select {
	case v, ok := <-ch:
		t.Fatalf("%s yielded %v (open: %v) %s", what, v, ok, why)
	default:
	}
}

func testReleaseWatchYieldsWhenTermIsRevoked(t *testing.T, h Harness, name string) {
	if _, ok := h.Store.(leasestore.ReleaseWatcher); !ok {
		t.Skip("the store is not a leasestore.ReleaseWatcher")
	}
	a := mustClaim(t, h, name, "a")
	held := refusedFor(t, h, name, "b", a)
	released := watchRelease(t, h, held)
	for _, d := range []time.Duration{h.Term, 2 * h.Term} {
		mustExtend(t, h, a, d, "extending the held term")
	}
	wantQuiet(t, "the release watch", released, "while the term was held")
	mustRevoke(t, h, a, "Revoke")
	wantReleased(t, released, "the term was revoked")
	// Released between the refusal and the watch: the watch says so.
	wantReleased(t, watchRelease(t, h, held), "the term was over when the watch began")
	c := mustClaim(t, h, name, "c")
	wantReleased(t, watchRelease(t, h, held), "another term began after the watched one ended")
	wantQuiet(t, "the release watch", watchRelease(t, h, refusedFor(t, h, name, "d", c)), "for a live term")
}

// lostWithin bounds, in real time, how long a LossNotifier may take to
// report a term that ended (etcd's watch is asynchronous).
const lostWithin = 10 * time.Second

// watchLost returns the store's Lost channel for g, or nil when the store is
// not a leasestore.LossNotifier. The watch ends with the test.
func watchLost(t *testing.T, h Harness, g leasestore.Grant) <-chan struct{} {
	t.Helper()
	n, ok := h.Store.(leasestore.LossNotifier)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := n.Lost(ctx, g)
	if ch == nil {
		t.Fatalf("Lost(%+v) returned a nil channel for a live term", g)
	}
	return ch
}

func wantLost(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(lostWithin):
		t.Fatalf("Lost stayed open %v after %s", lostWithin, why)
	}
}

func testLostClosesWhenTermIsRevoked(t *testing.T, h Harness, name string) {
	if _, ok := h.Store.(leasestore.LossNotifier); !ok {
		t.Skip("the store is not a leasestore.LossNotifier")
	}
	a := mustClaim(t, h, name, "a")
	lost := watchLost(t, h, a)
	for _, d := range []time.Duration{h.Term, 2 * h.Term} { // etcd moves a longer term to a new etcd lease
		mustExtend(t, h, a, d, "extending the held term")
	}
	wantQuiet(t, "Lost", lost, "while the term was held")
	mustRevoke(t, h, a, "Revoke")
	wantLost(t, lost, "the term was revoked")
	wantLost(t, watchLost(t, h, a), "the term was over when the watch began")
}

func mustClaim(t *testing.T, h Harness, name, holder string) leasestore.Grant {
	t.Helper()
	g, err := h.Store.Claim(context.Background(), name, holder, h.Term)
	if err != nil {
		t.Fatalf("Claim(%q, %q, %v): %v", name, holder, h.Term, err)
	}
	checkGrant(t, "Claim", g, name, holder, h.Term)
	return g
}

// mustExtend extends g for d and returns the renewed grant; what names
// the call if it fails.
func mustExtend(t *testing.T, h Harness, g leasestore.Grant, d time.Duration, what string) leasestore.Grant {
	t.Helper()
	renewed, err := h.Store.Extend(context.Background(), g, d)
	if err != nil {
		t.Fatalf("%s: Extend(%v): %v", what, d, err)
	}
	return renewed
}

// mustRevoke revokes g; what names the call if it fails.
func mustRevoke(t *testing.T, h Harness, g leasestore.Grant, what string) {
	t.Helper()
	if err := h.Store.Revoke(context.Background(), g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func checkGrant(t *testing.T, op string, g leasestore.Grant, name, holder string, d time.Duration) {
	t.Helper()
	if g.Name != name || g.Holder != holder {
		t.Errorf("%s returned grant for (%q, %q), want (%q, %q)", op, g.Name, g.Holder, name, holder)
	}
	if g.Token == 0 {
		t.Errorf("%s returned token 0, want > 0", op)
	}
	if g.Duration < d {
		t.Errorf("%s granted %v, want at least the %v requested", op, g.Duration, d)
	}
}

func wantHeldBy(t *testing.T, op string, err error, holder string) {
	t.Helper()
	var he *leasestore.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("%s: got error %v, want a *leasestore.HeldError naming %q", op, err, holder)
	}
	if !errors.Is(err, leasestore.ErrHeld) {
		t.Errorf("%s: error %v does not match leasestore.ErrHeld", op, err)
	}
	if he.Holder != holder {
		t.Errorf("%s: HeldError names holder %q, want %q", op, he.Holder, holder)
	}
}

// wantNotHeld checks that err is the definitive loss of term g: a
// *leasestore.NotHeldError naming g's lease and token, and naming holder as
// the holder now when holder is not empty.
func wantNotHeld(t *testing.T, op string, err error, g leasestore.Grant, holder string) {
	t.Helper()
	var nh *leasestore.NotHeldError
	switch {
	case !errors.Is(err, leasestore.ErrNotHeld):
		t.Fatalf("%s: got error %v, want leasestore.ErrNotHeld", op, err)
	case !errors.As(err, &nh):
		t.Fatalf("%s: got error %v, want a *leasestore.NotHeldError", op, err)
	case nh.Name != g.Name || nh.Token != g.Token:
		t.Fatalf("%s: NotHeldError names lease %q token %d, want %q token %d", op, nh.Name, nh.Token, g.Name, g.Token)
	case holder != "" && nh.Holder != holder:
		t.Fatalf("%s: NotHeldError names holder %q, want %q (who holds the lease now)", op, nh.Holder, holder)
	}
}

func wantAmbiguousOrNil(t *testing.T, op string, err error) {
	t.Helper()
	if errors.Is(err, leasestore.ErrHeld) || errors.Is(err, leasestore.ErrNotHeld) {
		t.Errorf("%s with a cancelled ctx returned the definitive %v; want success or an ambiguous error", op, err)
	}
}

func testClaimFreeLease(t *testing.T, h Harness, name string) {
	mustClaim(t, h, name, "a")
}

func testClaimWhileHeldNamesHolder(t *testing.T, h Harness, name string) {
	mustClaim(t, h, name, "a")
	_, err := h.Store.Claim(context.Background(), name, "b", h.Term)
	wantHeldBy(t, "second Claim by another holder", err, "a")
}

func testClaimWhileHeldBySameHolderName(t *testing.T, h Harness, name string) {
	g := mustClaim(t, h, name, "a")
	_, err := h.Store.Claim(context.Background(), name, "a", h.Term)
	wantHeldBy(t, "second Claim under the same holder name", err, "a")
	// The original term is untouched by the denied claim.
	g2 := mustExtend(t, h, g, h.Term, "after a denied claim")
	if g2.Token != g.Token {
		t.Errorf("Extend after a denied claim changed the token from %d to %d", g.Token, g2.Token)
	}
}

func testNamesAreIndependent(t *testing.T, h Harness, name string) {
	mustClaim(t, h, name+"-1", "a")
	mustClaim(t, h, name+"-2", "b")
	mustClaim(t, h, name+"-3", "a")
}

func testExtendLiveTermKeepsToken(t *testing.T, h Harness, name string) {
	g := mustClaim(t, h, name, "a")
	for i := range 3 {
		g2 := mustExtend(t, h, g, h.Term, fmt.Sprintf("#%d of the live term", i+1))
		checkGrant(t, "Extend", g2, name, "a", h.Term)
		if g2.Token != g.Token {
			t.Fatalf("Extend #%d changed the token from %d to %d", i+1, g.Token, g2.Token)
		}
		g = g2
	}
}

func testExtendForeignTokenIsNotHeld(t *testing.T, h Harness, name string) {
	g := mustClaim(t, h, name, "a")
	forged := g
	forged.Token = g.Token + 1_000_003
	_, err := h.Store.Extend(context.Background(), forged, h.Term)
	wantNotHeld(t, "Extend with a token the store never issued for this term", err, forged, "")
	other := mustClaim(t, h, name+"-other", "a")
	crossed := g
	crossed.Token = other.Token
	if crossed.Token != g.Token {
		_, err = h.Store.Extend(context.Background(), crossed, h.Term)
		wantNotHeld(t, "Extend with the token of another lease", err, crossed, "")
	}
	mustExtend(t, h, g, h.Term, "Extend of the real term after forged extends")
}

func testExtendOldTermOfSameHolderIsNotHeld(t *testing.T, h Harness, name string) {
	old := mustClaim(t, h, name, "a")
	mustRevoke(t, h, old, "Revoke")
	// A restarted process re-claims under the same holder name.
	fresh := mustClaim(t, h, name, "a")
	if fresh.Token <= old.Token {
		t.Fatalf("re-claim by the same holder name got token %d, want > %d", fresh.Token, old.Token)
	}
	_, err := h.Store.Extend(context.Background(), old, h.Term)
	wantNotHeld(t, "Extend of the old term after a same-name re-claim", err, old, "a")
	mustExtend(t, h, fresh, h.Term, "Extend of the new term")
}

func testRevokeThenExtendIsNotHeld(t *testing.T, h Harness, name string) {
	g := mustClaim(t, h, name, "a")
	mustRevoke(t, h, g, "Revoke of the live term")
	_, err := h.Store.Extend(context.Background(), g, h.Term)
	wantNotHeld(t, "Extend after Revoke", err, g, "")
}

func testRevokeTwiceIsNotHeld(t *testing.T, h Harness, name string) {
	g := mustClaim(t, h, name, "a")
	mustRevoke(t, h, g, "first Revoke")
	wantNotHeld(t, "second Revoke", h.Store.Revoke(context.Background(), g), g, "")
}

func testClaimAfterRevokeGetsLargerToken(t *testing.T, h Harness, name string) {
	a := mustClaim(t, h, name, "a")
	mustRevoke(t, h, a, "Revoke")
	b := mustClaim(t, h, name, "b")
	if b.Token <= a.Token {
		t.Fatalf("claim after revoke got token %d, want > %d", b.Token, a.Token)
	}
	wantNotHeld(t, "Revoke of the old term after a new claim", h.Store.Revoke(context.Background(), a), a, "b")
	mustExtend(t, h, b, h.Term, "the new holder's term was disturbed by the old term's revoke")
}

// maxExpiryRounds bounds how long the expiry test waits beyond the granted
// Duration for a store whose expiry is coarse (etcd checks every 500ms).
const maxExpiryRounds = 10

func testUnextendedTermExpires(t *testing.T, h Harness, name string) {
	a := mustClaim(t, h, name, "a")
	lost := watchLost(t, h, a) // nil unless the store is a LossNotifier
	var released <-chan error  // nil unless the store is a ReleaseWatcher
	if _, ok := h.Store.(leasestore.ReleaseWatcher); ok {
		released = watchRelease(t, h, refusedFor(t, h, name, "w", a))
	}
	h.Advance(a.Duration)
	var b leasestore.Grant
	for round := 0; ; round++ {
		var err error
		b, err = h.Store.Claim(context.Background(), name, "b", h.Term)
		if err == nil {
			break
		}
		if !errors.Is(err, leasestore.ErrHeld) || round == maxExpiryRounds {
			t.Fatalf("Claim %v after an unextended %v term began: %v",
				a.Duration+time.Duration(round)*h.Term, a.Duration, err)
		}
		h.Advance(h.Term)
	}
	checkGrant(t, "Claim after expiry", b, name, "b", h.Term)
	if b.Token <= a.Token {
		t.Fatalf("claim after expiry got token %d, want > %d", b.Token, a.Token)
	}
	_, err := h.Store.Extend(context.Background(), a, h.Term)
	wantNotHeld(t, "Extend of the expired term", err, a, "b")
	if lost != nil {
		wantLost(t, lost, "the term expired")
	}
	if released != nil {
		wantReleased(t, released, "the term expired")
	}
}

func testConcurrentClaimsHaveOneWinner(t *testing.T, h Harness, name string) {
	const n = 8
	type result struct {
		g   leasestore.Grant
		err error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			g, err := h.Store.Claim(context.Background(), name, fmt.Sprintf("h%d", i), h.Term)
			results[i] = result{g, err}
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, r := range results {
		if r.err == nil {
			if winner != "" {
				t.Fatalf("two concurrent claims won: %q and %q", winner, r.g.Holder)
			}
			winner = r.g.Holder
			checkGrant(t, fmt.Sprintf("claim h%d", i), r.g, name, fmt.Sprintf("h%d", i), h.Term)
		}
	}
	if winner == "" {
		t.Fatalf("no concurrent claim won: %+v", results)
	}
	for i, r := range results {
		if r.err != nil {
			wantHeldBy(t, fmt.Sprintf("losing claim h%d", i), r.err, winner)
		}
	}
}

func testCancelledContextIsNeverDefinitive(t *testing.T, h Harness, name string) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	g, err := h.Store.Claim(cancelled, name, "a", h.Term)
	wantAmbiguousOrNil(t, "Claim", err)
	if err == nil {
		checkGrant(t, "Claim with a cancelled ctx", g, name, "a", h.Term)
	} else {
		// The claim may have been applied; use a lease of its own.
		name += "-2"
		g = mustClaim(t, h, name, "a")
	}

	g2, err := h.Store.Extend(cancelled, g, h.Term)
	wantAmbiguousOrNil(t, "Extend", err)
	if err == nil && g2.Token != g.Token {
		t.Errorf("Extend with a cancelled ctx changed the token from %d to %d", g.Token, g2.Token)
	}
	// Whatever happened, the term is still live and extendable.
	mustExtend(t, h, g, h.Term, "Extend after a cancelled Extend")

	err = h.Store.Revoke(cancelled, g)
	wantAmbiguousOrNil(t, "Revoke", err)
	err2 := h.Store.Revoke(context.Background(), g)
	switch {
	case err == nil:
		wantNotHeld(t, "Revoke after a successful cancelled-ctx Revoke", err2, g, "")
	case err2 != nil && !errors.Is(err2, leasestore.ErrNotHeld):
		t.Fatalf("Revoke after an ambiguous Revoke: %v", err2)
	}
}

func testClaimRefusesBadNames(t *testing.T, h Harness, name string) {
	huge := strings.Repeat("x", 1<<20) // a megabyte
	// Each holder case claims a lease of its own, so that a store that
	// takes one bad holder is told of each.
	for _, c := range []struct{ what, name, holder string }{
		{"an empty name", "", "a"},
		{"an empty holder", name + "-1", ""},
		{"a name with a newline", name + "\n[+]forged ok", "a"},
		{"a holder with a newline", name + "-3", "a\n[+]forged ok"},
		{"a name of a megabyte", huge, "a"},
		{"a holder of a megabyte", name + "-5", huge},
	} {
		g, err := h.Store.Claim(context.Background(), c.name, c.holder, h.Term)
		switch {
		case err == nil:
			t.Errorf("Claim with %s succeeded (token %d), want a NotValid error", c.what, g.Token)
			continue
		case errors.Is(err, leasestore.ErrHeld) || errors.Is(err, leasestore.ErrNotHeld):
			t.Errorf("Claim with %s answered the definitive %.200q, want a NotValid error", c.what, err.Error())
		case !errors.Is(err, jujuerrors.NotValid):
			t.Errorf("Claim with %s: %.200q, want a NotValid error", c.what, err.Error())
		case len(err.Error()) >= 1024 || strings.ContainsAny(err.Error(), "\n\r"):
			t.Errorf("Claim with %s: the refusal, %d bytes, is not one line of less than 1 KiB: %.200q",
				c.what, len(err.Error()), err.Error())
		}
		if strings.HasPrefix(c.name, name+"-") {
			mustClaim(t, h, c.name, "a") // the refused claim took nothing
		}
	}
}

// configMaxName is the longest Name and Holder a lease.Config admits;
// testClaimAdmitsLongNames checks that it still is.
const configMaxName = 253

func testClaimAdmitsLongNames(t *testing.T, h Harness, name string) {
	holder := "unit-" + strings.Repeat("ü", (configMaxName-len("unit-"))/2)
	holder += strings.Repeat("0", configMaxName-len(holder))
	long := name + "-" + strings.Repeat("a", configMaxName-len(name)-1)
	cfg := lease.Config{Name: long, Holder: holder, Duration: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("leasetest is out of date: lease.Config refuses a %d-byte name or holder: %v", configMaxName, err)
	}
	if cfg.Holder += "0"; cfg.Validate() == nil {
		t.Fatalf("leasetest is out of date: lease.Config admits a holder of %d bytes", len(cfg.Holder))
	}
	mustClaim(t, h, name, holder)
	mustClaim(t, h, long, "a")
}
