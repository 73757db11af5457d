package etcdlease_test

// Another client writes the key of a held term (issue 31). A term is ours
// only while its key records it: created at the term's token, its value
// naming the holder, on an etcd lease the store put it on. Each intruder
// write below leaves the key looking alive — still there, still on an etcd
// lease someone keeps alive — and each must end the term: the store's
// Extend answers *leasestore.NotHeldError saying what it saw, its loss notifier
// fires, and a tracker leading on it stops leading long before its next
// scheduled renewal (Duration one minute: the first renewal is due 57 s
// after the claim, the test's ctx ends after 20 s).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// An intrusion is another client's write to the key of a held term.
type intrusion struct {
	// write makes it, through cli, to key.
	write func(ctx context.Context, t *testing.T, cli *clientv3.Client, key string)
	// reason matches what the store's *leasestore.NotHeldError says it saw,
	// and holder whom it names as holding the lease now (regular
	// expressions), by store kind ("" for any kind not listed).
	reason, holder map[string]string
}

// forKind is m's entry for kind, else its entry "".
func forKind(m map[string]string, kind storeKind) string {
	if v, ok := m[kind.name]; ok {
		return v
	}
	return m[""]
}

func testIntrusion(t *testing.T, kind storeKind, in intrusion) {
	m := etcdtest.Start(t)
	cli, intruder := m.Client(), newClient(t, m.Endpoints()...)
	const d = time.Minute // terms of 2 min, renewed after 57 s
	store := kind.make(t, cli, "/intruder/", 2*d)
	ctx := testCtx(t)
	reason, holder := forKind(in.reason, kind), "^"+forKind(in.holder, kind)+"$"

	// The store's own answers.
	g, err := store.Claim(ctx, "raw", "a", 2*d)
	require.NoError(t, err)
	lost := store.(leasestore.LossNotifier).Lost(ctx, g)
	require.NotNil(t, lost)
	in.write(ctx, t, intruder, "/intruder/raw")
	requireClosed(t, lost, "Lost stayed open after the intruder's write")
	_, err = store.Extend(ctx, g, 2*d)
	var nh *leasestore.NotHeldError
	require.ErrorAs(t, err, &nh, "Extend after the intruder's write")
	require.Equal(t, g.Token, nh.Token)
	require.Regexp(t, reason, nh.Reason)
	require.Regexp(t, holder, nh.Holder)
	_, err = store.Extend(ctx, g, 2*d)
	require.ErrorIs(t, err, leasestore.ErrNotHeld, "once over, the term stays over")

	// A tracker leading on the store.
	tr := newTracker(t, lease.Config{Store: store, Name: "led", Holder: "a", Duration: d})
	held := nextStatus(t, tr, 10*time.Second, isHeld, isNotHeld, "the first claim")
	runs := make(chan lease.Status, 2)
	ended := make(chan error, 2)
	leadCtx, stopLeading := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() {
		led <- tr.Lead(leadCtx, func(ctx context.Context, st lease.Status) error {
			runs <- st
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	select {
	case st := <-runs:
		require.Equal(t, held.Token, st.Token)
	case <-ctx.Done():
		t.Fatal("Lead never ran")
	}
	in.write(ctx, t, intruder, "/intruder/led")
	select {
	case err = <-ended:
	case <-ctx.Done():
		st, _ := tr.Current()
		t.Fatalf("the Lead function still ran when the test's 20 s ran out, well before the next renewal (tracker %+v)", st)
	}
	require.ErrorIs(t, err, lease.ErrNotLeader)
	require.ErrorAs(t, err, &nh, "the store's definitive answer")
	require.Equal(t, held.Token, nh.Token)
	require.Regexp(t, reason, nh.Reason)
	st, err := tr.Check(ctx, 0)
	if st.State == lease.Held {
		// The store freed the key and the tracker claimed a new term.
		require.Greater(t, st.Token, held.Token, "Held again under the term the intruder ended")
	} else {
		require.ErrorIs(t, err, lease.ErrNotLeader)
	}
	require.NotZero(t, tr.Report().Losses)
	stopLeading()
	require.ErrorIs(t, <-led, context.Canceled)
}

// keyLease is the etcd lease the key is on.
func keyLease(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// The intruder puts its own name in the key, leaving it on our etcd lease
// (which our store would go on keeping alive): Store.Holder named the
// intruder with our token while the tracker stayed Held through every
// renewal, because Extend confirmed a term by create revision and etcd
// lease alone.
func TestIntruderRewritingTheValueEndsTheTerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		testIntrusion(t, kind, intrusion{
			write: func(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) {
				_, err := cli.Put(ctx, key, "intruder", clientv3.WithIgnoreLease())
				require.NoError(t, err)
			},
			reason: map[string]string{"": `key rewritten: value names "intruder"$`},
			holder: map[string]string{"": "intruder"},
		})
	})
}

// The intruder moves the key, naming us still, to an etcd lease of its
// own: our keep-alives no longer decide when the key goes.
func TestIntruderMovingTheKeyToItsEtcdLeaseEndsTheTerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		var theirs clientv3.LeaseID
		testIntrusion(t, kind, intrusion{
			write: func(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) {
				gr, err := cli.Grant(ctx, 600)
				require.NoError(t, err)
				theirs = gr.ID
				_, err = cli.Put(ctx, key, "a", clientv3.WithLease(gr.ID))
				require.NoError(t, err)
			},
			reason: map[string]string{"": "key moved to etcd lease [0-9a-f]+: written by another client$"},
		})
		require.NotZero(t, theirs)
	})
}

// The intruder takes the key, naming us still, off every etcd lease: it
// never expires, whatever our keep-alives do. (The Store's Extend then
// kept etcd lease 0 "alive" and answered a stale member's "no such lease":
// ambiguous for ever, and Holder said "the etcd lease is gone".)
func TestIntruderTakingTheKeyOffItsEtcdLeaseEndsTheTerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		testIntrusion(t, kind, intrusion{
			write: func(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) {
				_, err := cli.Put(ctx, key, "a")
				require.NoError(t, err)
			},
			reason: map[string]string{"": "key has no etcd lease: written by another client$"},
		})
	})
}

// The intruder deletes the key and puts it back as it was — our holder's
// name, on our etcd lease — at a new create revision: another term, even
// if it looks like ours. The store may see the delete alone first (a
// SessionStore then deletes the key it finds on its session with no term
// of its own). This one passed on the code before issue 31 too (the
// SessionStore said only "term over").
func TestIntruderRecreatingTheKeyEndsTheTerm(t *testing.T) {
	t.Parallel()
	forEachStoreParallel(t, func(t *testing.T, kind storeKind) {
		testIntrusion(t, kind, intrusion{
			write: func(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) {
				ours := keyLease(ctx, t, cli, key)
				resp, err := cli.Txn(ctx).Then(clientv3.OpDelete(key), clientv3.OpPut(key+".tmp", "x")).Commit()
				require.NoError(t, err)
				require.True(t, resp.Succeeded)
				_, err = cli.Put(ctx, key, "a", clientv3.WithLease(ours))
				require.NoError(t, err)
			},
			// A tracker's Extend, woken by the delete, may read the key
			// before the put.
			reason: map[string]string{"": "key (gone|created again at revision [0-9]+)$"},
			holder: map[string]string{"": "a?"},
		})
	})
}

// A key no store of this package writes is no term: Holder does not
// report one (issue 31: a key whose value is empty came back as a Grant
// with Holder "", which Claim itself refuses; one with no etcd lease was
// "not confirmed: ... the etcd lease is gone"). Claims are refused while
// such a key exists, so Holder says so as Claim does (leasestore.ErrHeld).
func TestHolderOfAKeyRecordingNoTermSaysWhatItIs(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	gr, err := cli.Grant(ctx, 600)
	require.NoError(t, err)
	forEachStore(t, func(t *testing.T, kind storeKind) {
		prefix := "/foreign/" + kind.name + "/"
		store := kind.make(t, cli, prefix, time.Second).(interface {
			leasestore.Store
			Holder(ctx context.Context, name string) (leasestore.Grant, error)
		})
		for _, c := range []struct {
			name string
			put  []clientv3.OpOption
			says string
		}{
			{"no-holder", []clientv3.OpOption{clientv3.WithLease(gr.ID)}, "key names no holder: written by another client"},
			{"no-etcd-lease", nil, `key has no etcd lease: written by another client, naming "x"`},
		} {
			value := "x"
			if c.name == "no-holder" {
				value = ""
			}
			_, err := cli.Put(ctx, prefix+c.name, value, c.put...)
			require.NoError(t, err)
			g, err := store.Holder(ctx, c.name)
			require.Error(t, err, "%s: Holder answered %+v", c.name, g)
			require.Zero(t, g)
			require.ErrorIs(t, err, leasestore.ErrHeld, c.name)
			require.NotErrorIs(t, err, leasestore.ErrUnconfirmed, c.name)
			require.ErrorContains(t, err, c.says)
			_, err = store.Claim(ctx, c.name, "b", time.Second)
			require.ErrorIs(t, err, leasestore.ErrHeld, "%s: a claim is refused as Holder says", c.name)
		}
	})
}

// An error quotes at most 64 bytes of a value another client wrote, with
// its control characters escaped, and its size: a megabyte value forges
// no line and is not echoed whole.
func TestIntruderValueIsQuotedBounded(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	huge := "\n[+]forged ok\n" + string(make([]byte, 1<<20))
	forEachStore(t, func(t *testing.T, kind storeKind) {
		prefix := "/huge/" + kind.name + "/"
		store := kind.make(t, cli, prefix, 2*time.Minute) // no term runs out here
		g, err := store.Claim(ctx, "x", "a", 2*time.Minute)
		require.NoError(t, err)
		lost := store.(leasestore.LossNotifier).Lost(ctx, g)
		_, err = cli.Put(ctx, prefix+"x", huge, clientv3.WithIgnoreLease())
		require.NoError(t, err)
		requireClosed(t, lost, "Lost stayed open after the intruder's write")
		_, err = store.Extend(ctx, g, 2*time.Minute)
		require.ErrorIs(t, err, leasestore.ErrNotHeld)
		require.Less(t, len(err.Error()), 512, "the error quotes the value whole")
		require.NotContains(t, err.Error(), "\n")
		require.Contains(t, err.Error(), `key rewritten: value names "\n[+]forged ok\n\x00`)
		require.Contains(t, err.Error(), fmt.Sprintf("(%d bytes)", len(huge)))
	})
}
