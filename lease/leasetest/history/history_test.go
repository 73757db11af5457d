package history_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is s seconds after t0.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// held is a Check that promised token to node until until, asked at asked
// and returned at ret (seconds after t0).
func held(node string, token uint64, asked, ret, until float64) history.Answer {
	return history.Answer{Node: node, Call: history.CallCheck,
		Status: lease.Status{State: lease.Held, Holder: node, Token: token, Until: at(until)},
		Asked:  at(asked), Returned: at(ret)}
}

// heldFailed is a Check's Held answer with ErrRenewalFailed: the renewal
// was not confirmed, the promise still stands.
func heldFailed(node string, token uint64, asked, ret, until float64) history.Answer {
	a := held(node, token, asked, ret, until)
	a.Err = &lease.RenewalFailedError{Name: "l", Err: context.DeadlineExceeded, Until: at(until)}
	return a
}

// unknown is a Check's Unknown answer: the promise of token ran out
// unconfirmed at until.
func unknown(node string, token uint64, asked, ret, until float64) history.Answer {
	return history.Answer{Node: node, Call: history.CallCheck,
		Status: lease.Status{State: lease.Unknown, Token: token, Until: at(until)},
		Err:    &lease.RenewalFailedError{Name: "l", Err: context.DeadlineExceeded, Until: at(until)},
		Asked:  at(asked), Returned: at(ret)}
}

func notLeader(node string, asked, ret float64) history.Answer {
	return history.Answer{Node: node, Call: history.CallCheck,
		Status: lease.Status{State: lease.NotHeld, Holder: "other"},
		Err:    &lease.NotLeaderError{Name: "l", Holder: "other", Err: leasestore.ErrNotHeld},
		Asked:  at(asked), Returned: at(ret)}
}

func current(node string, token uint64, read, until float64) history.Answer {
	return history.Answer{Node: node, Call: history.CallCurrent,
		Status:   lease.Status{State: lease.Held, Holder: node, Token: token, Until: at(until)},
		Returned: at(read)}
}

// lead is a Lead run under a promise of token until until, from start to
// end, ended by cause.
func lead(node string, token uint64, start, end, until float64, cause error) history.Answer {
	return history.Answer{Node: node, Call: history.CallLead,
		Status: lease.Status{State: lease.Held, Holder: node, Token: token, Until: at(until)},
		Err:    cause, Asked: at(start), Returned: at(end)}
}

func stepDown(node string, asked, ret float64) history.Answer {
	return history.Answer{Node: node, Call: history.CallStepDown, Asked: at(asked), Returned: at(ret)}
}

func write(node string, token uint64, sent, ret float64, accepted bool) history.Answer {
	a := history.Answer{Node: node, Call: history.CallWrite, Status: lease.Status{Token: token},
		Asked: at(sent), Returned: at(ret)}
	if !accepted {
		a.Err = &lease.StaleTokenError{Token: token, Newest: token + 1}
	}
	return a
}

var errNotLeader = &lease.NotLeaderError{Name: "l", Err: leasestore.ErrNotHeld}

func verify(answers ...history.Answer) []history.Violation {
	var rec history.Recorder
	for _, a := range answers {
		rec.Record(a)
	}
	return rec.Verify()
}

// Each violation is caught, and named with the answers that show it.
func TestVerifyCatchesEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []history.Answer
		rule    history.Rule
		earlier int // index of the Earlier answer in answers; -1 for none
		later   int
		text    string // in the report
	}{{
		name:    "two holders",
		answers: []history.Answer{held("a", 5, 0, 0, 3), held("b", 9, 2, 2.5, 5)},
		rule:    history.Overlap, earlier: 0, later: 1,
		text: "overlap: two terms promised for 500ms: a check held token 5 until +3.000s [+0.000s, +0.000s]; " +
			"b check held token 9 until +5.000s [+2.000s, +2.500s]",
	}, {
		name:    "the second promise stands inside the first",
		answers: []history.Answer{held("a", 5, 0, 0, 10), held("b", 9, 2, 2, 3)},
		rule:    history.Overlap, earlier: 0, later: 1, text: "for 1s",
	}, {
		name: "a renewal extends the first promise into the second",
		answers: []history.Answer{held("a", 5, 0, 0, 2), held("a", 5, 1.5, 1.5, 3.5),
			held("b", 9, 3, 3, 6)},
		rule: history.Overlap, earlier: 1, later: 2, text: "for 500ms",
	}, {
		name:    "a Current read while another is promised",
		answers: []history.Answer{held("a", 5, 0, 0, 3), current("b", 9, 1, 4)},
		rule:    history.Overlap, earlier: 0, later: 1,
	}, {
		name:    "a Lead run acts past its promise into the next",
		answers: []history.Answer{lead("a", 5, 0, 4, 3, errNotLeader), held("b", 9, 3.5, 3.5, 6)},
		rule:    history.Overlap, earlier: 0, later: 1, text: "for 500ms",
	}, {
		name: "leaders with no promise of their own run at once",
		answers: []history.Answer{
			{Node: "client-go-0", Call: history.CallLead, Asked: at(0), Returned: at(2)},
			{Node: "client-go-1", Call: history.CallLead, Asked: at(1), Returned: at(3)},
		},
		rule: history.Overlap, earlier: 0, later: 1, text: "for 1s",
	}, {
		name:    "one token promised to two nodes",
		answers: []history.Answer{held("a", 5, 0, 0, 1), held("b", 5, 2, 2, 3)},
		rule:    history.TokenOrder, earlier: 0, later: 1, text: "token 5 promised to two nodes",
	}, {
		name:    "an older term promised after a newer one",
		answers: []history.Answer{held("b", 9, 1, 1, 1.2), held("a", 5, 1.5, 1.5, 2)},
		rule:    history.TokenOrder, earlier: 0, later: 1, text: "term 5 promised after term 9",
	}, {
		name:    "one node's tokens go back",
		answers: []history.Answer{held("a", 9, 0, 0, 1), held("a", 5, 2, 2, 3)},
		rule:    history.TokenOrder, earlier: 0, later: 1,
	}, {
		name:    "a Lead run of an older term after a newer term's write",
		answers: []history.Answer{write("b", 9, 0, 0.5, true), lead("a", 5, 1, 1.5, 2, nil)},
		rule:    history.TokenOrder, earlier: 0, later: 1,
	}, {
		name:    "not leader while promised",
		answers: []history.Answer{held("a", 5, 0, 0, 2), notLeader("a", 1.4, 1.5)},
		rule:    history.NotLeaderWhilePromised, earlier: 0, later: 1,
		text: "not-leader-while-promised: a check not-held [+1.400s, +1.500s]: lease \"l\": not the leader: " +
			"held by \"other\"; while a check held token 5 until +2.000s [+0.000s, +0.000s]",
	}, {
		name:    "a Lead run ended as not leader inside its promise",
		answers: []history.Answer{lead("a", 5, 0, 1, 2, errNotLeader)},
		rule:    history.NotLeaderWhilePromised, earlier: 0, later: 0,
	}, {
		name: "not leader after a step-down that came before the promise",
		answers: []history.Answer{stepDown("a", 0, 0.1), held("a", 9, 1, 1, 3),
			notLeader("a", 2, 2)},
		rule: history.NotLeaderWhilePromised, earlier: 1, later: 2,
	}, {
		name:    "held with a failed renewal past the promise's end",
		answers: []history.Answer{held("a", 5, 0, 0, 2), heldFailed("a", 5, 2, 2.1, 2)},
		rule:    history.HeldPastUntil, earlier: -1, later: 1,
		text: "held-past-until: a check held token 5 until +2.000s [+2.000s, +2.100s]: " +
			"lease \"l\": renewal not confirmed",
	}, {
		name:    "held past the promise's end, no error",
		answers: []history.Answer{held("a", 5, 0, 0, 2), held("a", 5, 2.5, 2.5, 2)},
		rule:    history.HeldPastUntil, earlier: -1, later: 1,
	}, {
		name:    "a Lead run started past its promise",
		answers: []history.Answer{lead("a", 5, 2, 2.5, 2, nil)},
		rule:    history.HeldPastUntil, earlier: -1, later: 0,
	}, {
		name: "a write accepted from a term that had ended",
		answers: []history.Answer{held("a", 5, 0, 0, 2), held("b", 9, 3, 3, 5),
			write("a", 5, 3.5, 3.6, true)},
		rule: history.StaleWrite, earlier: 1, later: 2,
		text: "stale-write: token 5 accepted after term 9 began: a write token 5 accepted [+3.500s, +3.600s]; " +
			"b check held token 9 until +5.000s [+3.000s, +3.000s]",
	}, {
		name:    "a write accepted after a newer term's write",
		answers: []history.Answer{write("b", 9, 0, 1, true), write("a", 5, 2, 2.1, true)},
		rule:    history.StaleWrite, earlier: 0, later: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			vs := verify(tc.answers...)
			var found *history.Violation
			for i := range vs {
				if vs[i].Rule == tc.rule {
					found = &vs[i]
					break
				}
			}
			require.NotNil(t, found, "no %v among %v", tc.rule, vs)
			if tc.earlier >= 0 {
				assert.Equal(t, tc.answers[tc.earlier], found.Earlier)
			} else {
				assert.Zero(t, found.Earlier)
			}
			assert.Equal(t, tc.answers[tc.later], found.Later)
			assert.Contains(t, found.String(), tc.text)
		})
	}
}

// Safe histories pass, at the boundaries too, and however late their
// answers are recorded.
func TestVerifyPassesSafeHistories(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []history.Answer
	}{{
		name:    "a promise ends exactly when the next begins",
		answers: []history.Answer{held("a", 5, 0, 0, 3), held("b", 9, 2.9, 3, 6)},
	}, {
		name:    "not leader at the promise's Until",
		answers: []history.Answer{held("a", 5, 0, 0, 2), notLeader("a", 2, 2)},
	}, {
		name:    "not leader after the promise's Until",
		answers: []history.Answer{held("a", 5, 0, 0, 2), notLeader("a", 2.5, 2.6)},
	}, {
		name: "not leader decided before the promise returned",
		// Asked as the promise returned: the two are concurrent.
		answers: []history.Answer{held("a", 5, 0, 1, 2), notLeader("a", 1, 1.5)},
	}, {
		name: "slow answers",
		answers: []history.Answer{
			held("a", 5, 0, 0, 2),
			held("a", 5, 1.9, 2.6, 2), // decided before 2, returned at 2.6
			held("b", 9, 2.1, 2.2, 4),
			notLeader("a", 2.7, 2.7),
		},
	}, {
		name:    "an older term asked before the newer returned",
		answers: []history.Answer{held("b", 9, 1, 2, 3), held("a", 5, 0.5, 1.5, 1.6)},
	}, {
		name: "ambiguous, then unknown past the promise",
		answers: []history.Answer{held("a", 5, 0, 0, 2), heldFailed("a", 5, 1.5, 1.6, 2),
			unknown("a", 5, 2, 2.1, 2), held("b", 9, 3, 3, 5)},
	}, {
		name: "a stale Current read past its Until",
		answers: []history.Answer{held("a", 5, 0, 0, 2), held("b", 9, 2.2, 2.2, 5),
			current("a", 5, 2.5, 2)},
	}, {
		name: "a Lead run that stops at its Until, and its successor",
		answers: []history.Answer{lead("a", 5, 0, 2, 2, &lease.RenewalFailedError{Name: "l", Err: context.DeadlineExceeded}),
			lead("b", 9, 2, 5, 5, nil)},
	}, {
		name: "a step-down hands over before the promise ends",
		answers: []history.Answer{
			held("a", 5, 0, 0, 10),
			lead("a", 5, 0, 1.05, 10, errNotLeader), // its ctx ended by the step-down
			notLeader("a", 1.05, 1.05),
			stepDown("a", 1, 1.1),
			held("b", 9, 1.08, 1.09, 20), // claimed once a released, before StepDown returned
			notLeader("a", 5, 5),
		},
	}, {
		name: "a check returned Held as the step-down returned",
		// One instant in a synctest bubble: the check was decided first.
		answers: []history.Answer{held("a", 5, 0, 0, 10), held("a", 5, 1, 1, 10), stepDown("a", 1, 1),
			held("b", 9, 1.5, 1.5, 20)},
	}, {
		name: "writes of each term in their turn, a stale one refused",
		answers: []history.Answer{held("a", 5, 0, 0, 2), write("a", 5, 1, 1.1, true),
			held("b", 9, 3, 3, 5), write("a", 5, 1.9, 3.2, true), // sent before term 9 began
			write("a", 5, 3.5, 3.6, false), write("b", 9, 4, 4.1, true)},
	}, {
		name: "one instant, many answers",
		answers: []history.Answer{held("a", 5, 1, 1, 2), held("a", 5, 1, 1, 2), notLeader("a", 1, 1),
			held("a", 5, 1, 1, 2)},
	}, {
		name:    "nothing recorded",
		answers: nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Empty(t, verify(tc.answers...))
		})
	}
}

// Answers about different leases are judged apart: their promises may
// stand at once, their tokens are their own.
func TestVerifyJudgesEachLeaseApart(t *testing.T) {
	of := func(lease string, a history.Answer) history.Answer { a.Lease = lease; return a }
	assert.Empty(t, verify(
		of("x", held("a", 9, 0, 0, 3)), of("y", held("b", 5, 1, 1, 4)),
		of("y", held("b", 6, 5, 5, 6)), of("x", held("c", 10, 5, 5, 6))))
	vs := verify(of("x", held("a", 9, 0, 0, 3)), of("y", held("b", 5, 1, 1, 4)), of("y", held("c", 4, 2, 2, 5)))
	require.Len(t, vs, 2, "%v", vs)
	assert.Equal(t, history.Overlap, vs[0].Rule)
	assert.Equal(t, history.TokenOrder, vs[1].Rule)
	assert.Contains(t, vs[1].String(), `token-order: term 4 promised after term 5: b check of "y" held token 5`)
}

// Each rule reports once per node and term, not once per answer.
func TestVerifyReportsOncePerTerm(t *testing.T) {
	answers := []history.Answer{held("a", 5, 0, 0, 10)}
	for i := range 100 {
		s := 1 + float64(i)/100
		answers = append(answers, notLeader("a", s, s), held("b", 9, s, s, 20))
	}
	vs := verify(answers...)
	rules := map[history.Rule]int{}
	for _, v := range vs {
		rules[v.Rule]++
	}
	assert.Equal(t, map[history.Rule]int{history.Overlap: 1, history.NotLeaderWhilePromised: 1}, rules, "%v", vs)
}

// Many goroutines record at once (run with -race); Verify sees every
// answer whatever the order they arrived in.
func TestRecorderIsSafeForConcurrentUse(t *testing.T) {
	const nodes, answers = 8, 1000
	var rec history.Recorder
	var wg sync.WaitGroup
	for n := range nodes {
		// Node n is promised term n+1 from n s to n+1.001 s: each
		// node's last promise overlaps the next node's first by 1ms.
		wg.Go(func() {
			for i := range answers {
				s := float64(n) + float64(i)/answers
				rec.Record(held(fmt.Sprint("node", n), uint64(n+1), s, s, s+0.002))
			}
		})
	}
	wg.Go(func() { _ = rec.Verify() })
	wg.Wait()
	vs := rec.Verify()
	require.Len(t, vs, nodes-1, "%v", vs)
	for n, v := range vs {
		assert.Equal(t, history.Overlap, v.Rule)
		assert.Equal(t, fmt.Sprint("node", n), v.Earlier.Node)
		assert.Equal(t, fmt.Sprint("node", n+1), v.Later.Node)
		assert.Equal(t, at(float64(n+1)), v.From)
		assert.Equal(t, at(float64(n)+0.999+0.002), v.To, "the last answer of node%d was seen", n)
	}
}

func TestStrings(t *testing.T) {
	assert.Equal(t, "check current lead step-down write Call(9)",
		fmt.Sprint(history.CallCheck, history.CallCurrent, history.CallLead, history.CallStepDown, history.CallWrite, history.Call(9)))
	assert.Equal(t, "overlap token-order not-leader-while-promised held-past-until stale-write Rule(9)",
		fmt.Sprint(history.Overlap, history.TokenOrder, history.NotLeaderWhilePromised, history.HeldPastUntil,
			history.StaleWrite, history.Rule(9)))
	a := held("a", 5, 0, 0.5, 2)
	assert.Equal(t, "a check held token 5 until 00:00:02.000000 [00:00:00.000000, 00:00:00.500000]", a.String())
	assert.True(t, errors.Is(errNotLeader, lease.ErrNotLeader))
}
