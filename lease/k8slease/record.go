package k8slease

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// What the Store reads of a Lease object — outside input: anyone allowed
// to write Leases writes them, and the API server checks little — and the
// record it holds a term by.

// termOf is the term the Lease object l records, read as the Store reads
// every Lease it is given: Holder is spec.holderIdentity ("" when
// released or absent), Token spec.leaseTransitions (0 when absent: it
// names no term), Duration spec.leaseDurationSeconds (0 when absent or not
// positive: expired, as client-go reads it). A nil l records nothing.
//
// A negative leaseTransitions is an error naming the Lease, the field and
// the value: the count of terms is lost, so the Store takes no term on such
// a Lease, and ends one it held. See DESIGN.md, "Tokens".
func termOf(l *coordinationv1.Lease) (leasestore.Grant, error) {
	if l == nil {
		return leasestore.Grant{}, nil
	}
	g := leasestore.Grant{Name: l.Name, Holder: holderOf(l), Token: tokenOf(l), Duration: durationOf(l)}
	if t := transitionsOf(l); t < 0 {
		return g, fmt.Errorf("the Lease object %s/%s has spec.leaseTransitions %d (must be at least 0, as the API server's validation requires: "+
			"it was written past it, and the count of terms it held is lost): delete the Lease object to restart its count, "+
			"or set leaseTransitions above every token handed out on it", l.Namespace, l.Name, t)
	}
	return g, nil
}

// grantOf is the grant of term (holder, token) that out, the API server's
// answer to this Store's write of that term, records: an error unless out
// records that term with a positive duration, in a grant Extend takes (a
// holder, a token in [1, MaxInt32]).
func grantOf(out *coordinationv1.Lease, holder string, token uint64) (leasestore.Grant, error) {
	g, err := termOf(out)
	if err != nil {
		return leasestore.Grant{}, err
	}
	if g.Holder != holder || g.Token != token || g.Duration <= 0 {
		return leasestore.Grant{}, fmt.Errorf("the API server answered the write of term %d for %q with a Lease that records term %d for %q, leaseDurationSeconds %s",
			token, holder, g.Token, g.Holder, secsText(out))
	}
	if _, err := checkExtend(g, g.Duration); err != nil {
		return leasestore.Grant{}, fmt.Errorf("the API server answered with a Lease that records no grant: %w", err)
	}
	return g, nil
}

// isTerm reports whether l records term g.
func isTerm(l *coordinationv1.Lease, g leasestore.Grant) bool {
	return l != nil && holderOf(l) == g.Holder && tokenOf(l) == g.Token
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// durationOf is l's leaseDurationSeconds; none, or one that is not
// positive, counts as zero (expired), as client-go counts it.
func durationOf(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// transitionsOf is l's leaseTransitions as written; none counts as 0.
func transitionsOf(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// tokenOf is the token of the term l records: its leaseTransitions, or 0
// (no term) when it has none or a negative one (see termOf).
func tokenOf(l *coordinationv1.Lease) uint64 {
	return uint64(max(transitionsOf(l), 0))
}

// ownTerm is the term this Store last wrote of one Lease (a claim or a
// renewal), the record it holds it by: the object, the holder and token,
// the term's acquireTime, and the leaseDurationSeconds and renewTime of
// its writes — those of the write the API server acknowledged last,
// widened to cover each write sent since that got no answer (it may have
// landed; at most one of them can have, as each was guarded by the
// acknowledged version's resourceVersion). A record of the term whose
// fields fall outside them was written by someone else.
type ownTerm struct {
	uid     types.UID
	holder  string
	token   uint64
	acquire time.Time
	secs    [2]int32     // least, most
	renew   [2]time.Time // earliest, latest
}

// termWrite is what a write of a term sets besides holder and token.
type termWrite struct {
	secs           int32 // 0: none
	acquire, renew time.Time
}

func writeOf(l *coordinationv1.Lease) termWrite {
	var w termWrite
	if l.Spec.LeaseDurationSeconds != nil {
		w.secs = *l.Spec.LeaseDurationSeconds
	}
	if l.Spec.AcquireTime != nil {
		w.acquire = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		w.renew = l.Spec.RenewTime.Time
	}
	return w
}

// wrote records out, the API server's answer to this Store's write of a
// term: the term it holds the Lease by, acknowledged. A release forgets
// it.
func (s *Store) wrote(out *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := holderOf(out)
	if h == "" {
		delete(s.own, out.Name)
		return
	}
	w := writeOf(out)
	s.own[out.Name] = ownTerm{
		uid: out.UID, holder: h, token: tokenOf(out), acquire: w.acquire,
		secs: [2]int32{w.secs, w.secs}, renew: [2]time.Time{w.renew, w.renew},
	}
}

// sent records next, a write of the term this Store holds that got no
// answer: it may have landed, so a record that shows it is still ours.
func (s *Store) sent(next *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	own, ok := s.own[next.Name]
	if !ok || own.holder != holderOf(next) || own.token != tokenOf(next) {
		return
	}
	w := writeOf(next)
	own.secs = [2]int32{min(own.secs[0], w.secs), max(own.secs[1], w.secs)}
	if w.renew.Before(own.renew[0]) {
		own.renew[0] = w.renew
	}
	if w.renew.After(own.renew[1]) {
		own.renew[1] = w.renew
	}
	s.own[next.Name] = own
}

// judge is nil while cur, the Lease now (nil if there is none), records
// term g as this Store wrote it (holder, token, object, and the
// acquireTime, leaseDurationSeconds and renewTime of its writes), and
// otherwise the definitive answer to op on g: the term is over. A grant of
// another Store is judged by holder, token and uid ("" for none). See
// DESIGN.md, "Which term is ours".
func (s *Store) judge(op leasestore.Op, g leasestore.Grant, uid types.UID, cur *coordinationv1.Lease) *leasestore.NotHeldError {
	if !isTerm(cur, g) {
		return s.over(op, g, cur, "")
	}
	s.mu.Lock()
	own, ok := s.own[g.Name]
	s.mu.Unlock()
	if ok && own.holder == g.Holder && own.token == g.Token {
		uid = own.uid
	}
	if uid != "" && cur.UID != uid {
		return s.over(op, g, cur, "the Lease object was deleted and re-created")
	}
	if !ok || own.holder != g.Holder || own.token != g.Token {
		return nil
	}
	w := writeOf(cur)
	var changed []string
	if !w.acquire.Equal(own.acquire) {
		changed = append(changed, fmt.Sprintf("acquireTime %s (this store wrote %s)", timeText(w.acquire), timeText(own.acquire)))
	}
	if w.secs < own.secs[0] || w.secs > own.secs[1] {
		changed = append(changed, fmt.Sprintf("leaseDurationSeconds %s (this store wrote %s)", secsText(cur), rangeText(own.secs[0], own.secs[1])))
	}
	if w.renew.Before(own.renew[0]) || w.renew.After(own.renew[1]) {
		changed = append(changed, fmt.Sprintf("renewTime %s (this store wrote %s)", timeText(w.renew),
			rangeText(timeText(own.renew[0]), timeText(own.renew[1]))))
	}
	if len(changed) > 0 {
		return s.over(op, g, cur, "the Lease was rewritten by another writer: "+strings.Join(changed, ", "))
	}
	return nil
}

func secsText(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return "none"
	}
	return fmt.Sprint(*l.Spec.LeaseDurationSeconds)
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// rangeText is lo, or "lo to hi".
func rangeText[T comparable](lo, hi T) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%v to %v", lo, hi)
}
