package k8slease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coldstart-go/coldstart/lease/k8slease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// fuzzLease is the Lease the fuzzer describes: each field present or
// absent (a nil pointer), with any value.
type fuzzLease struct {
	holder                 string
	hasHolder              bool
	transitions            int32
	hasTransitions         bool
	secs                   int32
	hasSecs                bool
	acquire, renew         int64 // Unix nanoseconds
	hasAcquire, hasRenew   bool
	preferred              string
	hasPreferred, hasStrat bool
}

func (z fuzzLease) lease() *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leader", Namespace: "ns", UID: "uid-fuzz"}}
	if z.hasHolder {
		l.Spec.HolderIdentity = &z.holder
	}
	if z.hasTransitions {
		l.Spec.LeaseTransitions = &z.transitions
	}
	if z.hasSecs {
		l.Spec.LeaseDurationSeconds = &z.secs
	}
	if z.hasAcquire {
		at := metav1.NewMicroTime(time.Unix(0, z.acquire))
		l.Spec.AcquireTime = &at
	}
	if z.hasRenew {
		at := metav1.NewMicroTime(time.Unix(0, z.renew))
		l.Spec.RenewTime = &at
	}
	if z.hasPreferred {
		l.Spec.PreferredHolder = &z.preferred
	}
	if z.hasStrat {
		s := coordinationv1.OldestEmulationVersion
		l.Spec.Strategy = &s
	}
	return l
}

// FuzzLeaseRecord fuzzes what the store reads from a Lease object that
// anyone may have written (issue 31): every field present or absent, with
// any value. Its parser (termOf) never panics, reads leaseTransitions as
// the token (0 for none) and refuses a negative one, naming the field and
// the value; a grant it reads from a write's answer (grantOf) always has a
// holder and a token Extend takes; and a Store given that Lease never
// answers a Claim with a grant its own Extend refuses, nor with a token at
// or below the Lease's count, nor names a term in a refusal other than the
// Lease's.
func FuzzLeaseRecord(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, z := range []fuzzLease{
		{holder: "a", hasHolder: true, transitions: 3, hasTransitions: true, secs: 2, hasSecs: true, acquire: now, renew: now, hasAcquire: true, hasRenew: true},
		{hasHolder: true, transitions: 7, hasTransitions: true, secs: 1, hasSecs: true, renew: now, hasRenew: true},                 // released, as client-go releases
		{holder: "old", hasHolder: true, transitions: -1, hasTransitions: true, secs: 1, hasSecs: true, renew: now, hasRenew: true}, // issue 31: token 0
		{holder: "old", hasHolder: true, transitions: -5, hasTransitions: true, secs: 1, hasSecs: true},                             // issue 31: token 2^64−4
		{holder: "old", hasHolder: true, transitions: math.MinInt32, hasTransitions: true},
		{holder: "old", hasHolder: true, transitions: math.MaxInt32, hasTransitions: true, secs: 1, hasSecs: true}, // its count at the maximum
		{holder: "old", hasHolder: true, transitions: 0, hasTransitions: true, secs: 15, hasSecs: true},            // client-go's first term
		{holder: "old", hasHolder: true}, // no count, no duration
		{holder: "old", hasHolder: true, transitions: 4, hasTransitions: true, secs: -3, hasSecs: true},
		{holder: "old", hasHolder: true, transitions: 4, hasTransitions: true, secs: math.MaxInt32, hasSecs: true, renew: math.MaxInt64, hasRenew: true},
		{holder: "old", hasHolder: true, transitions: 4, hasTransitions: true, secs: 0, hasSecs: true, renew: math.MinInt64, hasRenew: true},
		{hasHolder: true, preferred: "b", hasPreferred: true, hasStrat: true, transitions: 2, hasTransitions: true, secs: 1, hasSecs: true}, // reserved for b
		{holder: "a", hasHolder: true, preferred: "a", hasPreferred: true, transitions: 2, hasTransitions: true, secs: 1, hasSecs: true},
		{holder: "line\nbreak\x00", hasHolder: true, transitions: 9, hasTransitions: true, secs: 1, hasSecs: true},
	} {
		f.Add(z.holder, z.hasHolder, z.transitions, z.hasTransitions, z.secs, z.hasSecs,
			z.acquire, z.hasAcquire, z.renew, z.hasRenew, z.preferred, z.hasPreferred, z.hasStrat)
	}
	f.Fuzz(func(t *testing.T, holder string, hasHolder bool, transitions int32, hasTransitions bool, secs int32, hasSecs bool,
		acquire int64, hasAcquire bool, renew int64, hasRenew bool, preferred string, hasPreferred, hasStrat bool) {
		z := fuzzLease{holder, hasHolder, transitions, hasTransitions, secs, hasSecs, acquire, renew, hasAcquire, hasRenew, preferred, hasPreferred, hasStrat}
		l := z.lease()
		count := int32(0) // the Lease's count as written
		if hasTransitions {
			count = transitions
		}

		// The parser.
		g, err := k8slease.TermOf(l)
		switch {
		case count < 0:
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("spec.leaseTransitions %d", count)) || !strings.Contains(err.Error(), "ns/leader") {
				t.Fatalf("TermOf of leaseTransitions %d: %v, want an error naming the Lease, the field and the value", count, err)
			}
		case err != nil:
			t.Fatalf("TermOf of %+v: %v", l.Spec, err)
		case g.Token != uint64(count):
			t.Fatalf("TermOf of leaseTransitions %d: token %d", count, g.Token)
		}
		if g.Duration < 0 || hasSecs && secs > 0 && g.Duration != time.Duration(secs)*time.Second {
			t.Fatalf("TermOf of leaseDurationSeconds %d: duration %v", secs, g.Duration)
		}
		if err == nil && (hasHolder && g.Holder != holder || !hasHolder && g.Holder != "") {
			t.Fatalf("TermOf of holderIdentity %q (present: %v): holder %q", holder, hasHolder, g.Holder)
		}
		if grant, err := k8slease.GrantOf(l, g.Holder, g.Token); err == nil {
			requireExtendable(t, "GrantOf", grant)
		}

		// The store, given that Lease.
		clk := testclock.NewClock(time.Unix(0, now))
		srv, cli := newLeaseServer(t, l)
		s, err := k8slease.NewStore(cli, "ns", k8slease.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for try := range 2 {
			got, err := s.Claim(ctx, "leader", "a", 2*time.Second)
			var he *leasestore.HeldError
			switch {
			case err == nil:
				requireExtendable(t, "Claim", got)
				if got.Holder != "a" || got.Token <= uint64(max(count, 0)) {
					t.Fatalf("Claim of a Lease counting %d terms: %+v", count, got)
				}
				if _, err := s.Extend(ctx, got, 2*time.Second); err != nil {
					t.Fatalf("Extend of the grant %+v Claim returned: %v (the Lease: %+v)", got, err, srv.get("leader").Spec)
				}
				return
			case errors.As(err, &he):
				if he.Token != uint64(max(count, 0)) || he.Holder == "" {
					t.Fatalf("Claim of a Lease counting %d terms held by %q: refused naming %+v", count, holder, he)
				}
			case count < 0:
				if !strings.Contains(err.Error(), "spec.leaseTransitions") {
					t.Fatalf("Claim of a Lease counting %d terms: %v", count, err)
				}
			case count == math.MaxInt32:
			default:
				t.Fatalf("Claim #%d of %+v: %v", try+1, l.Spec, err)
			}
			clk.Advance(time.Duration(max(secs, 1)) * time.Second) // unchanged for its leaseDurationSeconds
		}
	})
}

// requireExtendable fails unless g is a grant the store's Extend takes: a
// holder, and a token in [1, MaxInt32].
func requireExtendable(t *testing.T, from string, g leasestore.Grant) {
	t.Helper()
	if g.Holder == "" || g.Token == 0 || g.Token > math.MaxInt32 || g.Duration <= 0 {
		t.Fatalf("%s returned a grant Extend refuses: %+v", from, g)
	}
	s, err := k8slease.NewStore(unvalidated(t), "ns")
	if err != nil {
		t.Fatal(err)
	}
	// The fake has no Lease: a valid grant is NotHeld, never NotValid.
	if _, err := s.Extend(context.Background(), g, g.Duration); jujuerrors.Is(err, jujuerrors.NotValid) {
		t.Fatalf("%s returned a grant Extend refuses: %v", from, err)
	}
}
