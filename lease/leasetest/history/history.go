package history

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coldstart-go/coldstart/lease"
)

// Call is the call an Answer records.
type Call int

const (
	// CallCheck is Tracker.Check (or the check WithLeadership makes):
	// Asked just before the call, Returned just after, Status and Err as
	// returned. A Held answer promises the lease from Returned to
	// Status.Until.
	CallCheck Call = iota
	// CallCurrent is Tracker.Current, read at Returned (Asked the same or
	// just before); Err is nil. A Held status read past its Until is stale,
	// not a broken promise (Current says so), and promises nothing.
	CallCurrent
	// CallLead is one run of a Lead (or WithLeadership) function: Asked
	// when it started, Returned when it returned, Status the one it led
	// under, Err context.Cause of its ctx as it returned (nil if it returned
	// before its ctx ended). Record it when the function returns. The run
	// acts as leader from Asked to Returned, and is promised the lease until
	// Status.Until when Status says Held. A leader with no promise of its
	// own (client-go's callbacks) is recorded with a zero Status: only its
	// run counts.
	CallLead
	// CallStepDown is Tracker.StepDown, Asked to Returned — or Close, which
	// gives the lease up too when it releases it (ReleaseOnClose). The
	// node's earlier promises end when it was asked (its successor may
	// start once it released; its Lead runs still count until they
	// return), and an ErrNotLeader that follows it is the step-down's, not
	// a broken promise.
	CallStepDown
	// CallWrite is a write made under a fencing token and answered by the
	// resource that guards it: Status.Token the token it carried, Err nil
	// if the resource applied it (anything else: refused, or no answer),
	// Asked when it was sent, Returned when answered.
	CallWrite
)

// String returns "check", "current", "lead", "step-down" or "write".
func (c Call) String() string {
	switch c {
	case CallCheck:
		return "check"
	case CallCurrent:
		return "current"
	case CallLead:
		return "lead"
	case CallStepDown:
		return "step-down"
	case CallWrite:
		return "write"
	}
	return fmt.Sprintf("Call(%d)", int(c))
}

// Answer is one answer a node was given: a tracker's answer to one call,
// or a guarded resource's answer to one fenced write (CallWrite). Asked
// and Returned bound the instant the answer was decided; both must be on
// the clock of every other answer in the history (see the package doc).
type Answer struct {
	// Lease is the lease's name: answers about different leases are
	// judged apart (tokens are ordered per lease). It may be left empty
	// in a history of one lease.
	Lease string
	// Node names the party that asked: one tracker of the lease (and the
	// writes it makes), unique among the lease's.
	Node   string
	Call   Call
	Status lease.Status
	Err    error
	// Asked is when the call was made, Returned when its answer came.
	Asked, Returned time.Time
}

// String describes the answer in one line, times as clock readings.
func (a Answer) String() string { return a.describe(time.Time{}) }

// describe is String with times relative to origin, unless it is zero.
func (a Answer) describe(origin time.Time) string {
	at := func(t time.Time) string {
		if origin.IsZero() {
			return t.Format("15:04:05.000000")
		}
		return fmt.Sprintf("%+.3fs", t.Sub(origin).Seconds())
	}
	when := fmt.Sprintf("[%s, %s]", at(a.Asked), at(a.Returned))
	if a.Asked.IsZero() {
		when = "at " + at(a.Returned)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", a.Node, a.Call)
	if a.Lease != "" {
		fmt.Fprintf(&b, " of %q", a.Lease)
	}
	switch a.Call {
	case CallWrite:
		ok := "accepted"
		if a.Err != nil {
			ok = "refused"
		}
		fmt.Fprintf(&b, " token %d %s", a.Status.Token, ok)
	case CallStepDown:
	default:
		fmt.Fprintf(&b, " %s", a.Status.State)
		if a.Status.Token != 0 {
			fmt.Fprintf(&b, " token %d", a.Status.Token)
		}
		if a.Status.State == lease.Held {
			fmt.Fprintf(&b, " until %s", at(a.Status.Until))
		}
	}
	fmt.Fprintf(&b, " %s", when)
	if a.Err != nil {
		fmt.Fprintf(&b, ": %v", a.Err)
	}
	return b.String()
}

// Recorder collects the answers of a test's trackers; Verify judges them.
// The zero value is ready to use. It is safe for concurrent use: record
// from every tracker's goroutines at once, in any order.
type Recorder struct {
	mu sync.Mutex // guards chunks
	// chunks hold the answers in the order recorded, chunkSize each: a
	// long run's history grows without being copied.
	chunks [][]Answer
}

const chunkSize = 1024

// Record adds a to the history. It only appends (the judging is Verify's),
// so recording every Check of a fault run costs little.
func (r *Recorder) Record(a Answer) {
	r.mu.Lock()
	n := len(r.chunks)
	if n == 0 || len(r.chunks[n-1]) == chunkSize {
		r.chunks = append(r.chunks, make([]Answer, 0, chunkSize))
		n++
	}
	r.chunks[n-1] = append(r.chunks[n-1], a)
	r.mu.Unlock()
}

// Verify judges the answers recorded so far and returns the violations,
// in the order of the answers that broke a rule; none means the history
// was safe. It may be called at any time, and again later.
//
// It applies five rules (see Rule), each reported once per node and term
// (once per two terms for Overlap), with the first answer that breaks it.
// A Held answer's promise starts at Returned (a Lead run's as it starts),
// and two answers are in order only when one Returned strictly before the
// other was Asked (DESIGN.md, "Order"). Token 0 means "no token": such an
// answer takes part in the overlap rule only.
func (r *Recorder) Verify() []Violation {
	r.mu.Lock()
	answers := slices.Concat(r.chunks...)
	r.mu.Unlock()
	return verify(answers)
}

// Rule is one of the promises Verify checks.
type Rule int

const (
	// Overlap: two terms were promised at one instant — two nodes, or one
	// node and two tokens. A term is promised from each Held answer's
	// Returned to its Until, and acted on for the whole of each Lead run.
	// A promise that ends exactly when the next begins does not overlap it.
	Overlap Rule = iota + 1
	// TokenOrder: a later term has a smaller token — a node was promised
	// a term in a call asked after a newer term (a greater token) had been
	// promised or written with — or one token was promised to two nodes.
	TokenOrder
	// NotLeaderWhilePromised: a node was told ErrNotLeader (by Check, or as
	// a Lead run's cause) at an instant when its own promise certainly
	// stood, and it had not stepped down: the store ended its term early.
	NotLeaderWhilePromised
	// HeldPastUntil: a Check answered Held, or a Lead run started, when
	// its Until had already passed. Past a promise's end an unconfirmed
	// tracker answers Unknown (ErrRenewalFailed), never Held.
	HeldPastUntil
	// StaleWrite: a fenced write was accepted from a term that had ended:
	// sent after a newer term had been promised, or after a write with a
	// greater token had been accepted.
	StaleWrite
)

// String returns "overlap", "token-order", "not-leader-while-promised",
// "held-past-until" or "stale-write".
func (r Rule) String() string {
	switch r {
	case Overlap:
		return "overlap"
	case TokenOrder:
		return "token-order"
	case NotLeaderWhilePromised:
		return "not-leader-while-promised"
	case HeldPastUntil:
		return "held-past-until"
	case StaleWrite:
		return "stale-write"
	}
	return fmt.Sprintf("Rule(%d)", int(r))
}

// Violation is one broken rule and the answers that show it.
type Violation struct {
	Rule Rule
	// Later broke the rule; Earlier is the answer it contradicts: the
	// promise that stood (Overlap, NotLeaderWhilePromised), or the answer
	// of the newer term (TokenOrder, StaleWrite), or the first node
	// promised the token (TokenOrder). Earlier is zero for HeldPastUntil,
	// which Later breaks alone.
	Earlier, Later Answer
	// From and To bound the instants both terms were promised (Overlap
	// only).
	From, To time.Time

	origin time.Time // the history's first instant, for String
}

// String says what happened, naming both answers (node, call, state,
// token, times relative to the history's first recorded instant).
func (v Violation) String() string {
	d := func(a Answer) string { return a.describe(v.origin) }
	switch v.Rule {
	case Overlap:
		return fmt.Sprintf("overlap: two terms promised for %v: %s; %s",
			v.To.Sub(v.From), d(v.Earlier), d(v.Later))
	case TokenOrder:
		if v.Earlier.Status.Token == v.Later.Status.Token {
			return fmt.Sprintf("token-order: token %d promised to two nodes: %s; %s",
				v.Later.Status.Token, d(v.Earlier), d(v.Later))
		}
		return fmt.Sprintf("token-order: term %d promised after term %d: %s; %s",
			v.Later.Status.Token, v.Earlier.Status.Token, d(v.Earlier), d(v.Later))
	case NotLeaderWhilePromised:
		return fmt.Sprintf("not-leader-while-promised: %s; while %s", d(v.Later), d(v.Earlier))
	case HeldPastUntil:
		return fmt.Sprintf("held-past-until: %s", d(v.Later))
	case StaleWrite:
		return fmt.Sprintf("stale-write: token %d accepted after term %d began: %s; %s",
			v.Later.Status.Token, v.Earlier.Status.Token, d(v.Later), d(v.Earlier))
	}
	return fmt.Sprintf("%v: %s; %s", v.Rule, d(v.Earlier), d(v.Later))
}
