package etcdlease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	jujuerrors "github.com/juju/errors"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease/etcdlease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// stepLog is the upgrade package's StepLog, which both stores implement
// structurally.
type stepLog interface {
	StepsDone(ctx context.Context, lease string) ([]string, error)
	RecordStep(ctx context.Context, lease string, token uint64, step string) error
}

var (
	_ stepLog = (*etcdlease.Store)(nil)
	_ stepLog = (*etcdlease.SessionStore)(nil)
)

// A holder records its group's steps under its token; once another
// holder took the lease over, the deposed one's record is refused, saying
// the term is over and who holds the lease, and nothing is recorded; the
// steps come back in the order they were recorded, each once.
func TestStepLogIsFencedByTheTerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m := etcdtest.Start(t)
		const d = 2 * time.Second
		prefix := fmt.Sprintf("/steplog/%s/", kind.name)
		a := kind.make(t, m.Client(), prefix, d)
		b := kind.make(t, newClient(t, m.Endpoints()...), prefix, d)
		logA, logB := a.(stepLog), b.(stepLog)

		steps, err := logA.StepsDone(ctx, "group")
		require.NoError(t, err)
		require.Empty(t, steps)

		ga, err := a.Claim(ctx, "group", "a", d)
		require.NoError(t, err)
		require.NoError(t, logA.RecordStep(ctx, "group", ga.Token, "4.0.1/schema-7"))
		require.NoError(t, logA.RecordStep(ctx, "group", ga.Token, "4.0.1/schema-8"))
		require.NoError(t, logA.RecordStep(ctx, "group", ga.Token, "4.0.1/schema-7"), "recording a step twice")
		// The step records are no lease: the term goes on.
		_, err = a.Extend(ctx, ga, d)
		require.NoError(t, err)

		// A takeover: a's term ends, b claims the lease.
		require.NoError(t, a.Revoke(ctx, ga))
		gb, err := b.Claim(ctx, "group", "b", d)
		require.NoError(t, err)

		err = logA.RecordStep(ctx, "group", ga.Token, "4.0.1/schema-9")
		require.ErrorIs(t, err, leasestore.ErrNotHeld)
		var nh *leasestore.NotHeldError
		require.ErrorAs(t, err, &nh)
		require.Equal(t, ga.Token, nh.Token)
		require.Equal(t, "b", nh.Holder, "the refusal names the holder now: %v", err)
		t.Logf("the deposed holder's record: %v", err)

		require.NoError(t, logB.RecordStep(ctx, "group", gb.Token, "4.0.1/schema-8"))
		require.NoError(t, logB.RecordStep(ctx, "group", gb.Token, "4.0.1/schema-9"))
		for _, l := range []stepLog{logA, logB} {
			steps, err := l.StepsDone(ctx, "group")
			require.NoError(t, err)
			require.Equal(t, []string{"4.0.1/schema-7", "4.0.1/schema-8", "4.0.1/schema-9"}, steps)
		}
		_, err = b.Extend(ctx, gb, d)
		require.NoError(t, err)
		// A key another client wrote, whose step is no valid name, is no
		// step.
		_, err = m.Client().Put(ctx, prefix+"group\x00bad\nstep", "x")
		require.NoError(t, err)
		steps, err = logB.StepsDone(ctx, "group")
		require.NoError(t, err)
		require.Len(t, steps, 3)
		// Another group's log is its own.
		steps, err = logB.StepsDone(ctx, "grou")
		require.NoError(t, err)
		require.Empty(t, steps)

		// The term over and nobody holding the lease: refused, naming nobody.
		require.NoError(t, b.Revoke(ctx, gb))
		err = logB.RecordStep(ctx, "group", gb.Token, "4.0.1/schema-10")
		require.ErrorIs(t, err, leasestore.ErrNotHeld)
		require.ErrorAs(t, err, &nh)
		require.Empty(t, nh.Holder)
		steps, err = logB.StepsDone(ctx, "group")
		require.NoError(t, err)
		require.Len(t, steps, 3)

		for _, bad := range []struct {
			name, step string
			token      uint64
		}{{"", "s", 1}, {"group", "", 1}, {"group", "s\n", 1}, {"group", "s", 0}} {
			err := logA.RecordStep(ctx, bad.name, bad.token, bad.step)
			require.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%+v: %v", bad, err)
		}
		_, err = logA.StepsDone(ctx, "")
		require.True(t, jujuerrors.Is(err, jujuerrors.NotValid), "%v", err)

		if ss, ok := b.(*etcdlease.SessionStore); ok {
			require.NoError(t, ss.Close())
			require.ErrorIs(t, ss.RecordStep(ctx, "group", gb.Token, "after-close"), leasestore.ErrNotSent)
			_, err := ss.StepsDone(ctx, "group")
			require.ErrorIs(t, err, leasestore.ErrNotSent)
		}
	})
}

// A step-log call whose ctx has ended sends nothing; one the member does
// not answer is ambiguous, never "not held".
func TestStepLogOutageIsAmbiguous(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		m := etcdtest.Start(t)
		const d = 2 * time.Second
		s := kind.make(t, m.Client(), fmt.Sprintf("/steplog/outage/%s/", kind.name), d)
		g, err := s.Claim(context.Background(), "group", "a", d)
		require.NoError(t, err)
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		err = s.(stepLog).RecordStep(ended, "group", g.Token, "s")
		require.ErrorIs(t, err, leasestore.ErrNotSent)
		require.NotErrorIs(t, err, leasestore.ErrUnconfirmed)

		m.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err = s.(stepLog).RecordStep(ctx, "group", g.Token, "s")
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
		require.NotErrorIs(t, err, leasestore.ErrNotHeld)
		ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = s.(stepLog).StepsDone(ctx, "group")
		require.ErrorIs(t, err, leasestore.ErrUnconfirmed)
		require.NoError(t, m.Restart()) // for a prompt Close
	})
}
