package history

import (
	"cmp"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/coldstart-go/coldstart/lease"
)

// piece is one interval [from, to) in which answers[i] certainly promised
// (or, for a Lead run, acted on) a term.
type piece struct {
	from, to time.Time
	i        int
}

// segment is a union of pieces of one group (a term of a node, or a
// node), sorted by from, covering [from, to) with no gap.
type segment struct {
	from, to time.Time
	pieces   []piece
}

// term is a node's term: the key of the overlap rule.
type term struct {
	node  string
	token uint64
}

// evidence is proof that the term of token had begun by at: a Held answer
// of it returned, or a write with it accepted.
type evidence struct {
	at    time.Time
	token uint64
	i     int
}

// dedupe is what makes two violations one report: the rule, the node
// and term that broke it, and what it contradicts.
type dedupe struct {
	rule       Rule
	node       string
	token      uint64
	at         time.Time
	other      string
	otherToken uint64
}

// verify is Verify of as, judging each lease's answers apart.
func verify(as []Answer) []Violation {
	var origin time.Time
	type group struct{ rec, norm []Answer }
	byLease := make(map[string]*group)
	var leases []string
	for _, a := range as {
		n := a
		if n.Asked.IsZero() { // a Current read, recorded with one time
			n.Asked = n.Returned
		}
		if origin.IsZero() || n.Asked.Before(origin) {
			origin = n.Asked
		}
		g := byLease[a.Lease]
		if g == nil {
			g = &group{}
			byLease[a.Lease] = g
			leases = append(leases, a.Lease)
		}
		g.rec, g.norm = append(g.rec, a), append(g.norm, n)
	}
	var out []Violation
	for _, l := range leases {
		out = append(out, verifyLease(byLease[l].rec, byLease[l].norm)...)
	}
	slices.SortStableFunc(out, func(x, y Violation) int {
		if c := x.Later.Returned.Compare(y.Later.Returned); c != 0 {
			return c
		}
		return x.Later.Asked.Compare(y.Later.Asked)
	})
	for i := range out {
		out[i].origin = origin
	}
	return out
}

// verifyLease judges the answers about one lease: rec as recorded, as the
// same with Asked set for Current reads recorded without it.
func verifyLease(rec, as []Answer) []Violation {
	v := &verifier{as: as, rec: rec, seen: make(map[dedupe]bool),
		acting: make(map[term][]piece), promised: make(map[string][]piece), stepDown: make(map[string][]int)}
	for i, a := range as {
		switch a.Call {
		case CallCheck, CallCurrent:
			v.answer(i, a)
		case CallLead:
			v.leadRun(i, a)
		case CallStepDown:
			v.stepDown[a.Node] = append(v.stepDown[a.Node], i)
		case CallWrite:
			if a.Err == nil {
				v.writes = append(v.writes, i)
				if a.Status.Token != 0 {
					v.evid = append(v.evid, evidence{a.Returned, a.Status.Token, i})
				}
			}
		}
	}
	for k, ps := range v.acting {
		v.acting[k] = v.cut(ps, v.stepDown[k.node])
	}
	v.overlaps()
	v.notLeader()
	v.tokenOrder()
	return v.out
}

// answer takes in a Check's or Current's answer a, the i-th.
func (v *verifier) answer(i int, a Answer) {
	if errors.Is(a.Err, lease.ErrNotLeader) {
		v.notLead = append(v.notLead, i)
	}
	if a.Status.State != lease.Held {
		return
	}
	tok := a.Status.Token
	if tok != 0 {
		v.evid = append(v.evid, evidence{a.Returned, tok, i})
	}
	if !a.Asked.Before(a.Status.Until) {
		if a.Call == CallCheck {
			v.add(Violation{Rule: HeldPastUntil, Later: v.rec[i]}, dedupe{rule: HeldPastUntil, node: a.Node, token: tok})
		}
		return // promised nothing: over when asked
	}
	if tok != 0 {
		v.orderQ = append(v.orderQ, i)
	}
	if a.Returned.Before(a.Status.Until) {
		p := piece{a.Returned, a.Status.Until, i}
		v.acting[term{a.Node, tok}] = append(v.acting[term{a.Node, tok}], p)
		v.promised[a.Node] = append(v.promised[a.Node], p)
	}
}

// leadRun takes in a Lead run a, the i-th: it acts from its start to its
// return, and is promised the lease until its Until if Held.
func (v *verifier) leadRun(i int, a Answer) {
	if errors.Is(a.Err, lease.ErrNotLeader) {
		v.notLead = append(v.notLead, i)
	}
	tok := a.Status.Token
	to := a.Returned
	switch {
	case a.Status.State != lease.Held:
	case !a.Asked.Before(a.Status.Until):
		v.add(Violation{Rule: HeldPastUntil, Later: v.rec[i]}, dedupe{rule: HeldPastUntil, node: a.Node, token: tok})
	default:
		if tok != 0 {
			v.orderQ = append(v.orderQ, i)
		}
		v.promised[a.Node] = append(v.promised[a.Node], piece{a.Asked, a.Status.Until, i})
		to = later(to, a.Status.Until)
	}
	if a.Status.State == lease.Held && tok != 0 {
		v.evid = append(v.evid, evidence{a.Asked, tok, i})
	}
	if a.Asked.Before(to) {
		v.acting[term{a.Node, tok}] = append(v.acting[term{a.Node, tok}], piece{a.Asked, to, i})
	}
}

// verifier is one Verify's work: the answers, what they promised and
// told, and the violations found.
type verifier struct {
	as   []Answer // as recorded, but Asked set for Current reads recorded without it
	rec  []Answer // as recorded
	out  []Violation
	seen map[dedupe]bool

	acting   map[term][]piece   // Overlap: per term of a node
	promised map[string][]piece // NotLeaderWhilePromised: per node
	stepDown map[string][]int
	notLead  []int      // ErrNotLeader answers and Lead runs
	evid     []evidence // of terms begun
	orderQ   []int      // promises whose token order is judged
	writes   []int      // accepted writes
}

func (v *verifier) add(vi Violation, key dedupe) {
	if v.seen[key] {
		return
	}
	v.seen[key] = true
	v.out = append(v.out, vi)
}

// merge sorts pieces by from and joins the ones that overlap or touch.
func merge(ps []piece) []segment {
	slices.SortFunc(ps, func(x, y piece) int { return x.from.Compare(y.from) })
	var segs []segment
	lo := 0
	for i, p := range ps {
		if n := len(segs); n > 0 && !p.from.After(segs[n-1].to) {
			s := &segs[n-1]
			s.to = later(s.to, p.to)
			s.pieces = ps[lo : i+1]
			continue
		}
		lo = i
		segs = append(segs, segment{from: p.from, to: p.to, pieces: ps[i : i+1]})
	}
	return segs
}

// standing returns the answer of the piece of s that stood at t (started
// at or before t, and ran the longest): the promise Verify names.
func (v *verifier) standing(s segment, t time.Time) Answer {
	best := s.pieces[0]
	for _, p := range s.pieces {
		if !p.from.After(t) && p.to.After(best.to) {
			best = p
		}
	}
	return v.rec[best.i]
}

// cut ends the promises of a node that stepped down: a promise made before
// a step-down returned stands no longer than the step-down was asked (the
// node gave it up; its successor may start once it released), while a
// Lead run still acts until it returned.
func (v *verifier) cut(ps []piece, sds []int) []piece {
	out := ps[:0]
	for _, p := range ps {
		a := v.as[p.i]
		for _, j := range sds {
			sd := v.as[j]
			// A promise returned as the step-down returned is one it ended:
			// the tracker claims again no sooner than a Duration later.
			if p.from.After(sd.Returned) || !p.to.After(sd.Asked) {
				continue
			}
			p.to = later(p.from, sd.Asked)
			if a.Call == CallLead {
				p.to = later(p.to, a.Returned)
			}
		}
		if p.from.Before(p.to) {
			out = append(out, p)
		}
	}
	return out
}

// overlaps reports each two terms whose promises share an instant.
func (v *verifier) overlaps() {
	type keyed struct {
		segment
		term term
	}
	var all []keyed
	for k, ps := range v.acting {
		for _, s := range merge(ps) {
			all = append(all, keyed{s, k})
		}
	}
	slices.SortFunc(all, func(x, y keyed) int {
		if c := x.from.Compare(y.from); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(x.term.node, y.term.node), cmp.Compare(x.term.token, y.term.token))
	})
	var active []keyed
	for _, s := range all {
		active = slices.DeleteFunc(active, func(a keyed) bool { return !a.to.After(s.from) })
		for _, a := range active {
			// a began no later than s and ends after s begins; segments of
			// one term never overlap (merge joined them), so a is another.
			to := a.to
			if s.to.Before(to) {
				to = s.to
			}
			v.add(Violation{Rule: Overlap, Earlier: v.standing(a.segment, s.from), Later: v.rec[s.pieces[0].i], From: s.from, To: to},
				dedupe{rule: Overlap, node: s.term.node, token: s.term.token, other: a.term.node, otherToken: a.term.token})
		}
		active = append(active, s)
	}
}

// notLeader reports each ErrNotLeader given while the node's own promise
// certainly stood: decided after a promise had returned (strictly, for a
// call; a Lead run's cause comes after it started) and before it ended.
func (v *verifier) notLeader() {
	segs := make(map[string][]segment, len(v.promised))
	for n, ps := range v.promised {
		segs[n] = merge(ps)
	}
	for _, i := range v.notLead {
		a := v.as[i]
		ss := segs[a.Node]
		// The last segment that began before a was asked (at or before,
		// for a Lead run, whose own promise begins as it starts).
		k := sort.Search(len(ss), func(k int) bool {
			if a.Call == CallLead {
				return ss[k].from.After(a.Asked)
			}
			return !ss[k].from.Before(a.Asked)
		}) - 1
		if k < 0 || !a.Returned.Before(ss[k].to) {
			continue
		}
		s := ss[k]
		if v.steppedDown(v.stepDown[a.Node], a, s) {
			continue
		}
		// Name the promise that stood latest into a's window.
		at := a.Asked
		if a.Call == CallLead {
			at = a.Returned
		}
		v.add(Violation{Rule: NotLeaderWhilePromised, Earlier: v.standing(s, at), Later: v.rec[i]},
			dedupe{rule: NotLeaderWhilePromised, node: a.Node, at: s.from})
	}
}

// steppedDown reports whether the node stepped down during segment s, no
// later than answer a returned: then a's ErrNotLeader may be its own.
func (v *verifier) steppedDown(sds []int, a Answer, s segment) bool {
	for _, j := range sds {
		sd := v.as[j]
		if !sd.Asked.After(a.Returned) && !sd.Returned.Before(s.from) {
			return true
		}
	}
	return false
}

// tokenOrder applies the TokenOrder and StaleWrite rules.
func (v *verifier) tokenOrder() {
	evid := v.evid
	slices.SortStableFunc(evid, func(x, y evidence) int { return x.at.Compare(y.at) })
	// best[k] is the evidence of the greatest token among evid[:k+1].
	best := make([]int, len(evid))
	for k := range evid {
		best[k] = k
		if k > 0 && evid[best[k-1]].token >= evid[k].token {
			best[k] = best[k-1]
		}
	}
	// newest returns the evidence of the greatest token begun strictly
	// before t, if any.
	newest := func(t time.Time) (evidence, bool) {
		k := sort.Search(len(evid), func(k int) bool { return !evid[k].at.Before(t) })
		if k == 0 {
			return evidence{}, false
		}
		return evid[best[k-1]], true
	}
	// A promise (TokenOrder) or an accepted write (StaleWrite) asked after
	// a greater token began.
	behind := func(rule Rule, is []int) {
		for _, i := range is {
			a := v.as[i]
			if e, ok := newest(a.Asked); ok && e.token > a.Status.Token {
				v.add(Violation{Rule: rule, Earlier: v.rec[e.i], Later: v.rec[i]},
					dedupe{rule: rule, node: a.Node, token: a.Status.Token})
			}
		}
	}
	behind(TokenOrder, v.orderQ)
	behind(StaleWrite, v.writes)
	// One token, one node: the first node promised a token owns it.
	owner := make(map[uint64]int)
	for _, e := range evid {
		a := v.as[e.i]
		if a.Call == CallWrite {
			continue
		}
		o, ok := owner[e.token]
		if !ok {
			owner[e.token] = e.i
			continue
		}
		if v.as[o].Node != a.Node {
			v.add(Violation{Rule: TokenOrder, Earlier: v.rec[o], Later: v.rec[e.i]},
				dedupe{rule: TokenOrder, node: a.Node, token: e.token, other: v.as[o].Node})
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
