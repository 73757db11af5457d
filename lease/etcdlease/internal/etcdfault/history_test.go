//go:build linux

package etcdfault_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
)

var t0 = time.Now()

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// held is an answer promising token to node until, asked at asked and
// returned at ret (seconds after t0).
func held(node string, token uint64, asked, ret, until float64) etcdfault.Answer {
	return etcdfault.Answer{
		Node: node, Status: lease.Status{State: lease.Held, Holder: node, Token: token, Until: at(until)},
		FirstAsked: at(asked), First: at(ret), LastAsked: at(asked), Last: at(ret), Count: 1,
	}
}

func notLeader(node string, ret float64) etcdfault.Answer {
	return etcdfault.Answer{
		Node: node, Status: lease.Status{State: lease.NotHeld}, Err: lease.ErrNotLeader, Class: etcdfault.AnswerNotLeader,
		FirstAsked: at(ret), First: at(ret), LastAsked: at(ret), Last: at(ret), Count: 1,
	}
}

var twoTerms = []etcdfault.Term{{Token: 5, Holder: "a", End: 9}, {Token: 9, Holder: "b"}}

func check(answers []etcdfault.Answer, writes ...etcdfault.Write) etcdfault.Verdict {
	return etcdfault.Check(etcdfault.History{Start: t0, Answers: answers, Writes: writes}, twoTerms, applied(writes), nil, time.Second)
}

func applied(ws []etcdfault.Write) map[string]int64 {
	m := make(map[string]int64)
	for _, w := range ws {
		if w.Rev != 0 {
			m[w.Key] = w.Rev
		}
	}
	return m
}

func TestCheckFindsTwoLeaders(t *testing.T) {
	v := check([]etcdfault.Answer{held("a", 5, 0, 0, 3), held("b", 9, 2, 2.5, 5)})
	require.False(t, v.OK())
	require.Len(t, v.Overlaps, 1)
	require.Equal(t, 500*time.Millisecond, v.Overlaps[0].To.Sub(v.Overlaps[0].From))
	require.Contains(t, v.String(), "overlap: two terms promised for 500ms")
}

// A correct store's history passes however late its answers are
// recorded: a promise starts when Check returned it, and an answer asked
// before a newer term was promised may return after it.
func TestCheckToleratesSlowAnswers(t *testing.T) {
	v := check([]etcdfault.Answer{
		held("a", 5, 0, 0, 2),
		held("a", 5, 1.9, 2.6, 2), // decided before 2, recorded at 2.6
		held("b", 9, 2.1, 2.2, 4),
		notLeader("a", 2.7),
	})
	require.True(t, v.OK(), "%v", v)
}

func TestCheckFindsNotLeaderWhilePromised(t *testing.T) {
	v := check([]etcdfault.Answer{held("a", 5, 0, 0, 2), notLeader("a", 1.5)})
	require.Equal(t, 1, v.NotLeaderInPromise)
	require.False(t, v.OK())
}

func TestCheckFindsOlderTermPromisedAfterNewer(t *testing.T) {
	// No overlap (b's promise is short and over), but a was promised term
	// 5 in a check asked after b was promised term 9.
	v := check([]etcdfault.Answer{held("b", 9, 1, 1, 1.2), held("a", 5, 1.5, 1.5, 2)})
	require.Empty(t, v.Overlaps)
	require.False(t, v.OK())
	require.Contains(t, v.String(), "term 5 promised after term 9")
}

func TestCheckFindsTermsEtcdDoesNotRecord(t *testing.T) {
	v := check([]etcdfault.Answer{held("b", 5, 0, 0, 1), held("a", 7, 2, 2, 3)})
	require.Contains(t, v.String(), "b was promised term 5, which etcd records as a's")
	require.Contains(t, v.String(), "a was promised term 7, which etcd never recorded")
}

func TestCheckJudgesWrites(t *testing.T) {
	answers := []etcdfault.Answer{held("a", 5, 0, 0, 2)}
	w := func(key string, fenced bool, acked float64, rev int64, ok bool) etcdfault.Write {
		wr := etcdfault.Write{Node: "a", Token: 5, Until: at(2), Fenced: fenced, Key: key, Sent: at(0.5), Rev: rev, Succeeded: ok}
		if acked > 0 {
			wr.Acked = at(acked)
		}
		return wr
	}
	writes := []etcdfault.Write{
		w("in-term", false, 1, 6, true),
		w("late", false, 2.5, 10, true),                // acknowledged after its promise: fencing's job
		w("refused", true, 1, 11, false),               // the fence held: not in etcd
		w("applied-in-b's-term", false, 1.5, 12, true), // inside its promise: broken
		w("fenced-outside", true, 1.5, 13, true),       // the fence failed
	}
	inEtcd := map[string]int64{"in-term": 6, "late": 10, "applied-in-b's-term": 12, "fenced-outside": 13}
	v := etcdfault.Check(etcdfault.History{Start: t0, Answers: answers, Writes: writes}, twoTerms, inEtcd, nil, time.Second)
	require.Equal(t, 1, v.WritesInTerm)
	require.Equal(t, 1, v.UnfencedLate)
	require.Equal(t, 1, v.FencedRefused)
	require.Len(t, v.Violations, 2, "%v", v)
	require.True(t, strings.Contains(v.Violations[0], "applied-in-b's-term") && strings.Contains(v.Violations[1], "fenced-outside"), "%v", v)
}

func TestCheckLiveness(t *testing.T) {
	answers := []etcdfault.Answer{held("a", 5, 0, 0, 3), held("b", 9, 4, 4.5, 6)}
	h := etcdfault.History{Start: t0, Answers: answers}
	v := etcdfault.Check(h, twoTerms, nil, []time.Time{at(4)}, time.Second)
	require.True(t, v.OK(), "%v", v)
	require.Equal(t, []time.Duration{500 * time.Millisecond}, v.Recovery)
	v = etcdfault.Check(h, twoTerms, nil, []time.Time{at(3)}, time.Second)
	require.False(t, v.OK())
	require.Equal(t, []time.Duration{-1}, v.Recovery)
}
