package sqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/sqllease"
)

// One Store's terms are renewed together: 100 trackers renewing every
// half second cost a few statements a second, not 200.
func TestTermsAreRenewedTogether(t *testing.T) {
	t.Parallel()
	const n, d, steady = 100, 500 * time.Millisecond, 2 * time.Second
	db := sql.OpenDB(countingConnector{&sqlite.Driver{}, sqliteDSN(t)})
	t.Cleanup(func() { db.Close() })
	store := newStore(t, db, sqllease.SQLite)
	trackers := make([]*lease.Tracker, n)
	for i := range trackers {
		tr, err := lease.NewTracker(lease.Config{Store: store, Name: fmt.Sprintf("together-%d", i), Holder: "c0", Duration: d})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trackers[i] = tr
	}
	for _, tr := range trackers {
		awaitState(t, tr, lease.Held)
	}
	before := statements.Load()
	<-time.After(steady)
	stmts := statements.Load() - before
	for i, tr := range trackers {
		if st, err := tr.Check(context.Background(), 0); st.State != lease.Held {
			t.Errorf("tracker %d: %+v, %v after %v", i, st, err, steady)
		}
	}
	// Alone, each tracker would extend every half-term (2/s each); together,
	// one statement every tenth of a row's duration (1.25 s): 8/s.
	if perSecond := float64(stmts) / steady.Seconds(); perSecond > 20 {
		t.Errorf("%d trackers cost %.0f statements/s, want a few (the terms renewed together)", n, perSecond)
	} else {
		t.Logf("%d trackers: %.1f statements/s", n, perSecond)
	}
}

// A row rewritten behind the Store's back (another holder written in by
// hand) ends the term at the next renewal: the tracker is told NotLeader
// naming the row's holder, never Held past it.
func TestRowRewrittenBehindTheStoreEndsTheTerm(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			db := e.open(t, "")
			store := newStore(t, db, e.dialect)
			name := unique(t, "rewritten")
			tr, err := lease.NewTracker(lease.Config{Store: store, Name: name, Holder: "a", Duration: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			awaitState(t, tr, lease.Held)
			q := `UPDATE coldstart_leases SET holder = 'intruder' WHERE name = $1`
			if e.dialect == sqllease.SQLite {
				q = `UPDATE coldstart_leases SET holder = 'intruder' WHERE name = ?1`
			}
			if _, err := db.Exec(q, name); err != nil {
				t.Fatal(err)
			}
			awaitState(t, tr, lease.NotHeld)
			st, err := tr.Check(context.Background(), 0)
			var nl *lease.NotLeaderError
			if !errors.As(err, &nl) || st.Holder != "intruder" {
				t.Fatalf("after the rewrite: %+v, %v; want NotLeader naming the intruder", st, err)
			}
		})
	}
}
