//go:build linux

package etcdfault

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasetest/history"
)

// AnswerClass is what kind of error a check returned.
type AnswerClass int

const (
	AnswerOK            AnswerClass = iota // no error
	AnswerNotLeader                        // matches lease.ErrNotLeader
	AnswerRenewalFailed                    // matches lease.ErrRenewalFailed
	AnswerOther                            // anything else (a check cut by its ctx)
)

// String returns "ok", "not-leader", "renewal-failed" or "other".
func (c AnswerClass) String() string {
	switch c {
	case AnswerOK:
		return "ok"
	case AnswerNotLeader:
		return "not-leader"
	case AnswerRenewalFailed:
		return "renewal-failed"
	case AnswerOther:
		return "other"
	}
	return fmt.Sprintf("AnswerClass(%d)", int(c))
}

func classOf(err error) AnswerClass {
	switch {
	case err == nil:
		return AnswerOK
	case errors.Is(err, lease.ErrNotLeader):
		return AnswerNotLeader
	case errors.Is(err, lease.ErrRenewalFailed):
		return AnswerRenewalFailed
	}
	return AnswerOther
}

// Answer is a run of equal answers of one node's Check: the same status
// and the same class of error, Count times, the first asked at FirstAsked
// and returned at First, the last asked at LastAsked and returned at Last.
type Answer struct {
	Node       string
	Status     lease.Status
	Err        error // of the first
	Class      AnswerClass
	FirstAsked time.Time
	First      time.Time
	LastAsked  time.Time
	Last       time.Time
	Count      int
}

func (a Answer) same(b Answer) bool {
	return a.Node == b.Node && a.Class == b.Class && a.Status.State == b.Status.State &&
		a.Status.Holder == b.Status.Holder && a.Status.Token == b.Status.Token && a.Status.Until.Equal(b.Status.Until)
}

// promises reports whether the answer promised the lease: Held (with or
// without a renewal error) until Status.Until.
func promises(a Answer) bool { return a.Status.State == lease.Held }

// Write is one put a node made while promised the lease.
type Write struct {
	Node   string
	Token  uint64    // the term it was promised
	Until  time.Time // the promise it was made under
	Fenced bool      // a transaction guarded by the lease key's create revision
	Key    string
	Sent   time.Time
	Acked  time.Time // zero when etcd did not answer
	Rev    int64     // the revision of etcd's answer
	// Succeeded: applied, as far as the answer says (a fenced put whose
	// compare failed was not).
	Succeeded bool
	Err       error
}

// History is everything a Workload saw.
type History struct {
	Start   time.Time
	Answers []Answer
	Writes  []Write
}

// Term is one term of the lease as etcd recorded it: the key created at
// revision Token with Holder as its value, until revision End (its
// deletion; 0 while it lasts).
type Term struct {
	Token  uint64
	Holder string
	End    int64
}

// Overlap is two promises of different terms that stood at one instant.
type Overlap struct {
	A, B     Promise
	From, To time.Time
}

// Promise is the union of a node's consecutive answers promising one
// term: from the first answer's return until the latest Until.
type Promise struct {
	Node     string
	Token    uint64
	From, To time.Time
}

// Verdict is the checker's finding about a history.
type Verdict struct {
	// Violations are broken promises, each said in a sentence. Empty means
	// the history is correct.
	Violations []string
	Overlaps   []Overlap
	// NotLeaderInPromise counts answers of ErrNotLeader given while the
	// same node's earlier promise still stood.
	NotLeaderInPromise int
	// Answers counts runs of equal answers by class; Checks counts checks.
	Answers map[AnswerClass]int
	Checks  int
	// Terms is the terms etcd recorded; Promised, those some node was
	// promised.
	Terms, Promised int
	// Recovery is, for each heal, how long until some node was promised a
	// term anew (a promise reaching past every earlier one); negative when
	// none came within the window.
	Recovery []time.Duration
	// Writes: made, applied in their own term, and applied outside it
	// (unfenced ones acknowledged inside their promise are violations;
	// UnfencedLate, acknowledged after it or not at all, are the hazard
	// fencing exists for), fenced ones refused.
	Writes, WritesInTerm, UnfencedLate, FencedRefused int
}

// OK reports whether no promise was broken.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

// Check judges history h against etcd's record of the lease (terms, by
// Token, and the revision at which each write key was applied, 0 for
// none) and the heals (times after which some node must be promised a
// fresh term within recoverWithin).
//
// It checks:
//   - no two promises of different terms stand at one instant. A promise
//     starts when Check returned it (an answer's decision lies between the
//     call and its return, so the return is the latest start the answer
//     allows, and scheduling delays only shorten what is compared);
//   - no ErrNotLeader while the node's own earlier promise stands (at the
//     answer's return, so a slow answer is never blamed);
//   - each promised term is one etcd recorded, held by the node promised
//     it; each node's terms increase; no term is promised in a check asked
//     after a later term was promised to anyone;
//   - a write applied outside its term is a violation if fenced (the fence
//     failed) or if acknowledged before its promise ran out;
//   - liveness after each heal.
//
// A correct store passes however slowly the machine runs (DESIGN.md).
func Check(h History, terms []Term, applied map[string]int64, heals []time.Time, recoverWithin time.Duration) Verdict {
	v := Verdict{Answers: make(map[AnswerClass]int), Terms: len(terms)}
	rel := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(h.Start).Seconds()) }
	for _, a := range h.Answers {
		v.Answers[a.Class]++
		v.Checks += a.Count
	}

	// The promises, judged by leasetest/history: overlaps, token order,
	// ErrNotLeader while promised, Held past Until, stale fenced writes.
	for _, x := range judge(h) {
		switch x.Rule {
		case history.Overlap:
			v.Overlaps = append(v.Overlaps, Overlap{A: promiseOf(x.Earlier), B: promiseOf(x.Later), From: x.From, To: x.To})
		case history.NotLeaderWhilePromised:
			v.NotLeaderInPromise++
		}
		v.Violations = append(v.Violations, x.String())
	}

	// Terms as etcd recorded them.
	byToken := make(map[uint64]Term, len(terms))
	for _, t := range terms {
		byToken[t.Token] = t
	}
	promised := make(map[uint64]bool)
	// The promising answers, node by node (by name), each node's in order.
	all := slices.DeleteFunc(slices.Clone(h.Answers), func(a Answer) bool { return !promises(a) })
	sort.SliceStable(all, func(i, j int) bool { return all[i].Node < all[j].Node })
	for _, a := range all {
		tok := a.Status.Token
		if promised[tok] {
			continue
		}
		promised[tok] = true
		t, ok := byToken[tok]
		switch {
		case !ok:
			v.Violations = append(v.Violations, fmt.Sprintf("%s was promised term %d, which etcd never recorded", a.Node, tok))
		case t.Holder != a.Node:
			v.Violations = append(v.Violations, fmt.Sprintf("%s was promised term %d, which etcd records as %s's", a.Node, tok, t.Holder))
		}
	}
	v.Promised = len(promised)
	sort.Slice(all, func(i, j int) bool { return all[i].First.Before(all[j].First) })

	// Writes.
	for _, w := range h.Writes {
		v.Writes++
		rev := applied[w.Key]
		if rev == 0 {
			if w.Fenced && w.Err == nil && !w.Succeeded {
				v.FencedRefused++
			}
			continue
		}
		t, in := termAt(terms, rev)
		if in && t.Token == w.Token {
			v.WritesInTerm++
			continue
		}
		where := "when no term held the key"
		if in {
			where = fmt.Sprintf("in %s's term %d", t.Holder, t.Token)
		}
		switch {
		case w.Fenced:
			v.Violations = append(v.Violations, fmt.Sprintf(
				"%s's fenced write %s for term %d was applied at revision %d %s", w.Node, w.Key, w.Token, rev, where))
		case !w.Acked.IsZero() && w.Acked.Before(w.Until):
			v.Violations = append(v.Violations, fmt.Sprintf(
				"%s's unfenced write %s, acknowledged at %s inside its promise of term %d (until %s), was applied at revision %d %s",
				w.Node, w.Key, rel(w.Acked), w.Token, rel(w.Until), rev, where))
		default:
			v.UnfencedLate++
		}
	}

	// Liveness: after each heal, a fresh promise within recoverWithin.
	for _, heal := range heals {
		var before time.Time
		for _, a := range all {
			if a.First.Before(heal) && a.Status.Until.After(before) {
				before = a.Status.Until
			}
		}
		got := time.Duration(-1)
		for _, a := range all { // sorted by First
			if !a.First.Before(heal) && a.Status.Until.After(before) {
				if d := a.First.Sub(heal); d <= recoverWithin {
					got = d
				}
				break
			}
		}
		v.Recovery = append(v.Recovery, got)
		if got < 0 {
			v.Violations = append(v.Violations, fmt.Sprintf(
				"no node was promised a fresh term within %v of the heal at %s", recoverWithin, rel(heal)))
		}
	}
	return v
}

// errRefused is a fenced write's answer when etcd applied nothing (the
// compare failed) without an error.
var errRefused = errors.New("fenced write not applied")

// judge records h's check answers (a run of equal answers as its first
// and its last: DESIGN.md) and fenced writes in a history.Recorder and
// verifies them.
func judge(h History) []history.Violation {
	var rec history.Recorder
	for _, a := range h.Answers {
		rec.Record(history.Answer{Node: a.Node, Call: history.CallCheck, Status: a.Status, Err: a.Err,
			Asked: a.FirstAsked, Returned: a.First})
		if a.Count > 1 {
			rec.Record(history.Answer{Node: a.Node, Call: history.CallCheck, Status: a.Status, Err: a.Err,
				Asked: a.LastAsked, Returned: a.Last})
		}
	}
	for _, w := range h.Writes {
		if !w.Fenced {
			continue // judged against etcd's revisions below
		}
		err := w.Err
		if err == nil && !w.Succeeded {
			err = errRefused
		}
		rec.Record(history.Answer{Node: w.Node, Call: history.CallWrite, Status: lease.Status{Token: w.Token},
			Err: err, Asked: w.Sent, Returned: w.Acked})
	}
	return rec.Verify()
}

// promiseOf is the Promise a violation's answer stands for.
func promiseOf(a history.Answer) Promise {
	return Promise{Node: a.Node, Token: a.Status.Token, From: a.Returned, To: a.Status.Until}
}

// termAt returns the term that held the key at revision rev.
func termAt(terms []Term, rev int64) (Term, bool) {
	for _, t := range terms {
		if int64(t.Token) <= rev && (t.End == 0 || rev < t.End) {
			return t, true
		}
	}
	return Term{}, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// String sums the verdict up in a few lines, the violations first.
func (v Verdict) String() string {
	var b strings.Builder
	for _, s := range v.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", s)
	}
	var maxOverlap time.Duration
	for _, o := range v.Overlaps {
		maxOverlap = max(maxOverlap, o.To.Sub(o.From))
	}
	fmt.Fprintf(&b, "%d checks (%d ok, %d renewal-failed, %d not-leader, %d other answer runs); "+
		"%d terms in etcd, %d promised; overlaps %d (longest %v); not-leader inside a promise %d; ",
		v.Checks, v.Answers[AnswerOK], v.Answers[AnswerRenewalFailed], v.Answers[AnswerNotLeader], v.Answers[AnswerOther],
		v.Terms, v.Promised, len(v.Overlaps), maxOverlap.Round(time.Millisecond), v.NotLeaderInPromise)
	fmt.Fprintf(&b, "writes %d (%d applied in their term, %d unfenced late, %d fenced refused); recovery after heals %v",
		v.Writes, v.WritesInTerm, v.UnfencedLate, v.FencedRefused, roundAll(v.Recovery))
	return b.String()
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Timeline lists the events and each node's changes of answer (state,
// term or class of error; not every renewal) in time order, times relative
// to the history's start: what happened, for a failing test's log.
func Timeline(h History, events []Event) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, e := range events {
		lines = append(lines, line{e.At, "** " + e.What})
	}
	last := make(map[string]Answer)
	for _, a := range h.Answers {
		p, seen := last[a.Node]
		last[a.Node] = a
		if seen && p.Status.State == a.Status.State && p.Status.Token == a.Status.Token && p.Class == a.Class {
			continue
		}
		text := fmt.Sprintf("%s %s token %d", a.Node, a.Status.State, a.Status.Token)
		if promises(a) {
			text += fmt.Sprintf(" until %.3fs", a.Status.Until.Sub(h.Start).Seconds())
		}
		if a.Err != nil {
			text += fmt.Sprintf(" (%s: %v)", a.Class, a.Err)
		}
		lines = append(lines, line{a.First, text})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%8.3fs %s\n", l.at.Sub(h.Start).Seconds(), l.text)
	}
	return b.String()
}

// Heals returns the times of the events that healed every fault.
func Heals(events []Event) []time.Time {
	var hs []time.Time
	for _, e := range events {
		if e.Healed {
			hs = append(hs, e.At)
		}
	}
	return hs
}
