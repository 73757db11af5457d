package leasestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/juju/clock"
	"github.com/juju/errors"
)

// MemStore is the embedded Store: leases in memory, expiring on an injected
// clock. It serves one process (several trackers contending in it) and
// tests. Tokens come from one counter, so they strictly increase per lease
// and across leases. The zero value is not usable; call NewMemStore.
type MemStore struct {
	clk   clock.Clock
	calls Counters

	mu    sync.Mutex
	terms map[string]memTerm // by lease name; may hold expired terms
	last  uint64             // the last token issued
	// watches are the open watches, by lease name, each ended when its
	// term ends: by a revoke, a claim that replaces it, or its expiry.
	watches map[string]map[*memWatch]struct{}
	steps   map[string][]string // upgrade steps recorded complete, by lease name, in order
}

// memWatch is one Lost or WatchRelease channel of the term token of a
// lease; one of lost and released is set, and closed when the term ends.
type memWatch struct {
	ctx      context.Context // once it ends, the watch reports nothing
	name     string
	token    uint64
	lost     chan struct{}
	released chan error
	expiry   clock.Timer // at the term's expiry as last seen; re-armed if extended
	unhook   func() bool // detaches the watch's ctx callback
}

type memTerm struct {
	grant  Grant
	expiry time.Time // the term is live while now < expiry
}

// MemStoreConfig is what a MemStore is timed on. The zero value is ready to
// use: the wall clock.
type MemStoreConfig struct {
	// Clock is what terms expire on. If it's nil, clock.WallClock will be
	// used.
	Clock clock.Clock
}

// NewMemStore returns an empty store timed on cfg.Clock.
func NewMemStore(cfg MemStoreConfig) *MemStore {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.WallClock
	}
	return &MemStore{clk: clk, terms: make(map[string]memTerm), watches: make(map[string]map[*memWatch]struct{}),
		steps: make(map[string][]string)}
}

var _ interface {
	Store
	LossNotifier
	ReleaseWatcher
	Reporter
} = (*MemStore)(nil)

// Claim implements Store. It returns a *HeldError naming the holder while a
// term is live, even when that holder has the same name as the claimant.
// A name or holder that a Config would refuse (see Config.Holder) is
// refused with a NotValid error, and so is a grant naming one in Extend
// and Revoke, and such a name in Holder.
func (m *MemStore) Claim(ctx context.Context, name, holder string, d time.Duration) (_ Grant, err error) {
	done := m.calls.Begin(OpClaim)
	defer func() { done(err) }()
	if err := checkNames(name, holder); err != nil {
		return Grant{}, err
	}
	if d <= 0 {
		return Grant{}, errors.NotValidf("lease %q duration %v (must be positive)", name, d)
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "claim lease %q", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if cur, ok := m.terms[name]; ok && now.Before(cur.expiry) {
		return Grant{}, &HeldError{Name: name, Holder: cur.grant.Holder, Token: cur.grant.Token}
	}
	m.last++
	g := Grant{Name: name, Holder: holder, Token: m.last, Duration: d}
	m.terms[name] = memTerm{grant: g, expiry: now.Add(d)}
	m.endTerms(name) // any watched term of name ended before this one
	return g, nil
}

// Extend implements Store. It extends only the live term g.Token; it never
// shortens a term, and reports the time left from now as the Duration.
func (m *MemStore) Extend(ctx context.Context, g Grant, d time.Duration) (_ Grant, err error) {
	done := m.calls.Begin(OpExtend)
	defer func() { done(err) }()
	if err := checkNames(g.Name, g.Holder); err != nil {
		return Grant{}, err
	}
	if d <= 0 {
		return Grant{}, errors.NotValidf("lease %q duration %v (must be positive)", g.Name, d)
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "extend lease %q", g.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.live(g, now)
	if !ok {
		return Grant{}, m.termOver("extend", g, now)
	}
	if exp := now.Add(d); exp.After(cur.expiry) {
		cur.expiry = exp
	}
	m.terms[g.Name] = cur
	out := cur.grant
	out.Duration = cur.expiry.Sub(now)
	return out, nil
}

// Revoke implements Store.
func (m *MemStore) Revoke(ctx context.Context, g Grant) (err error) {
	done := m.calls.Begin(OpRevoke)
	defer func() { done(err) }()
	if err := checkNames(g.Name, g.Holder); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errors.Annotatef(err, "revoke lease %q", g.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if _, ok := m.live(g, now); !ok {
		return m.termOver("revoke", g, now)
	}
	delete(m.terms, g.Name)
	m.endTerms(g.Name)
	return nil
}

// StoreReport implements Reporter.
func (m *MemStore) StoreReport() Report { return m.calls.StoreReport() }

// Holder returns the live term of the named lease, with the time it has
// left as Duration, or ErrNotHeld when nobody holds it: who leads now, for
// a status page or a test. A party deciding whether it may act as leader
// asks its Tracker's Check instead.
func (m *MemStore) Holder(ctx context.Context, name string) (Grant, error) {
	if err := CheckName("lease name", name); err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "read lease %q", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.terms[name]
	if !ok || !now.Before(cur.expiry) {
		return Grant{}, fmt.Errorf("read lease %q: nobody holds it: %w", name, ErrNotHeld)
	}
	out := cur.grant
	out.Duration = cur.expiry.Sub(now)
	return out, nil
}

// StepsDone returns the upgrade steps recorded complete for the group led
// through lease name, in the order they were recorded (upgrade.StepLog).
func (m *MemStore) StepsDone(ctx context.Context, name string) ([]string, error) {
	if err := CheckName("lease name", name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Annotatef(err, "read the steps of lease %q", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.steps[name]...), nil
}

// RecordStep records step complete for lease name's group if token is the
// token of the lease's live term, and otherwise records nothing and
// returns a *NotHeldError (upgrade.StepLog). Recording a step twice is not
// an error. A step is named as a lease is (CheckName).
func (m *MemStore) RecordStep(ctx context.Context, name string, token uint64, step string) error {
	if err := CheckName("lease name", name); err != nil {
		return err
	}
	if err := CheckName("step", step); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errors.Annotatef(err, "record step %q of lease %q", step, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if cur, ok := m.terms[name]; !ok || cur.grant.Token != token || !now.Before(cur.expiry) {
		e := &NotHeldError{Name: name, Token: token, Reason: fmt.Sprintf("record step %q: expired or revoked", step)}
		if ok && now.Before(cur.expiry) {
			e.Holder = cur.grant.Holder
			e.Reason = fmt.Sprintf("record step %q: lease claimed again (token %d)", step, cur.grant.Token)
		}
		return e
	}
	for _, s := range m.steps[name] {
		if s == step {
			return nil
		}
	}
	m.steps[name] = append(m.steps[name], step)
	return nil
}

// checkNames checks a lease name and a holder given to the store.
func checkNames(name, holder string) error {
	if err := CheckName("lease name", name); err != nil {
		return err
	}
	return CheckName("holder", holder)
}

// termOver is the definitive answer to op on a term that is over, naming
// the holder of the live term, if any. m.mu must be held.
func (m *MemStore) termOver(op string, g Grant, now time.Time) error {
	e := &NotHeldError{Name: g.Name, Token: g.Token, Reason: fmt.Sprintf("%s for %q: expired or revoked", op, g.Holder)}
	if cur, ok := m.terms[g.Name]; ok && now.Before(cur.expiry) {
		e.Holder = cur.grant.Holder
		e.Reason = fmt.Sprintf("%s for %q: lease claimed again (token %d)", op, g.Holder, cur.grant.Token)
	}
	return e
}

// live returns the term g belongs to if it is still live at now.
func (m *MemStore) live(g Grant, now time.Time) (memTerm, bool) {
	cur, ok := m.terms[g.Name]
	if !ok || cur.grant.Token != g.Token || cur.grant.Holder != g.Holder || !now.Before(cur.expiry) {
		return memTerm{}, false
	}
	return cur, true
}

// Lost implements LossNotifier: the channel is closed when the term g is
// revoked, replaced by a claim, or expires on the store's clock (at once if
// it is already over). When ctx ends first the channel stays open and the
// watch is dropped. Lost never blocks.
func (m *MemStore) Lost(ctx context.Context, g Grant) <-chan struct{} {
	w := &memWatch{ctx: ctx, name: g.Name, token: g.Token, lost: make(chan struct{})}
	m.watch(w, g)
	return w.lost
}

// WatchRelease implements ReleaseWatcher: the channel is closed when the
// term held names is revoked, replaced by a claim, or expires on the
// store's clock (at once if it is already over). When ctx ends first it
// stays open and the watch is dropped. It never blocks, and a MemStore
// watch never fails (a nil held yields a NotValid error at once).
func (m *MemStore) WatchRelease(ctx context.Context, held *HeldError) <-chan error {
	if held == nil {
		released := make(chan error, 1)
		released <- errors.NotValidf("nil *HeldError (must be a refused Claim's)")
		close(released)
		return released
	}
	w := &memWatch{ctx: ctx, name: held.Name, token: held.Token, released: make(chan error, 1)}
	m.watch(w, Grant{Name: held.Name, Holder: held.Holder, Token: held.Token})
	return w.released
}

// watch starts w, a watch of the term g, or closes it at once if that term
// is over.
func (m *MemStore) watch(w *memWatch, g Grant) {
	if w.ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.live(g, now)
	if !ok {
		w.close()
		return
	}
	if m.watches[g.Name] == nil {
		m.watches[g.Name] = make(map[*memWatch]struct{})
	}
	m.watches[g.Name][w] = struct{}{}
	w.expiry = m.clk.AfterFunc(cur.expiry.Sub(now), func() { m.expired(w) })
	w.unhook = context.AfterFunc(w.ctx, func() { m.unwatch(w) })
}

// close closes w's channel: its term is over.
func (w *memWatch) close() {
	if w.lost != nil {
		close(w.lost)
	} else {
		close(w.released)
	}
}

// expired runs when w's expiry timer fires: it ends w if its term is
// over, else re-arms the timer for the term's current expiry.
func (m *MemStore) expired(w *memWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.watches[w.name][w]; !ok {
		return // ended or dropped meanwhile
	}
	now := m.clk.Now()
	if cur, ok := m.terms[w.name]; ok && cur.grant.Token == w.token && now.Before(cur.expiry) {
		w.expiry.Reset(cur.expiry.Sub(now)) // extended: no new timer, no allocation under mu
		return
	}
	m.end(w)
}

// unwatch drops w, leaving its channel open: its ctx ended.
func (m *MemStore) unwatch(w *memWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.watches[w.name][w]; ok {
		m.drop(w)
	}
}

// endTerms closes every watch of the lease name: the term they watch (the
// live one, or an older one) has just ended. m.mu must be held.
func (m *MemStore) endTerms(name string) {
	for w := range m.watches[name] {
		m.end(w)
	}
}

// end drops w and closes its channel, unless its ctx has ended (its
// callback, which drops it, may not have run yet). m.mu must be held.
func (m *MemStore) end(w *memWatch) {
	m.drop(w)
	w.unhook()
	if w.ctx.Err() == nil {
		w.close()
	}
}

// drop removes w and stops its timer. m.mu must be held.
func (m *MemStore) drop(w *memWatch) {
	delete(m.watches[w.name], w)
	if len(m.watches[w.name]) == 0 {
		delete(m.watches, w.name)
	}
	w.expiry.Stop()
}
