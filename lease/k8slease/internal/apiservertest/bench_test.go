package apiservertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkExtend is one renewal through the Store: an update guarded by
// the cached resourceVersion. BenchmarkRawUpdate is its baseline, the one
// update client-go's LeaseLock sends per renewal; the ratio is the Store's
// own cost.
func BenchmarkExtend(b *testing.B) {
	cs := newClient(b, "")
	ns := newNamespace(b, cs)
	s := newStore(b, cs, ns)
	ctx := context.Background()
	g, err := s.Claim(ctx, "leader", "a", 10*time.Second)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Extend(ctx, g, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawUpdate(b *testing.B) {
	cs := newClient(b, "")
	ns := newNamespace(b, cs)
	s := newStore(b, cs, ns)
	ctx := context.Background()
	_, err := s.Claim(ctx, "leader", "a", 10*time.Second)
	require.NoError(b, err)
	leases := cs.CoordinationV1().Leases(ns)
	l, err := leases.Get(ctx, "leader", metav1.GetOptions{})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimHeld is a follower's claim of a held Lease: one read.
// BenchmarkRawGet is its baseline.
func BenchmarkClaimHeld(b *testing.B) {
	cs := newClient(b, "")
	ns := newNamespace(b, cs)
	ctx := context.Background()
	_, err := newStore(b, cs, ns).Claim(ctx, "leader", "a", 10*time.Second)
	require.NoError(b, err)
	s := newStore(b, cs, ns)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Claim(ctx, "leader", "b", 10*time.Second); err == nil {
			b.Fatal("claim of a held Lease succeeded")
		}
	}
}

func BenchmarkRawGet(b *testing.B) {
	cs := newClient(b, "")
	ns := newNamespace(b, cs)
	ctx := context.Background()
	_, err := newStore(b, cs, ns).Claim(ctx, "leader", "a", 10*time.Second)
	require.NoError(b, err)
	leases := cs.CoordinationV1().Leases(ns)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := leases.Get(ctx, "leader", metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
