package lease

import (
	"context"
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
	clk clock.Clock

	mu    sync.Mutex
	terms map[string]memTerm // by lease name; may hold expired terms
	last  uint64             // the last token issued
}

type memTerm struct {
	grant  Grant
	expiry time.Time // the term is live while now < expiry
}

// NewMemStore returns an empty store whose terms expire on clk (nil means
// clock.WallClock).
func NewMemStore(clk clock.Clock) *MemStore {
	if clk == nil {
		clk = clock.WallClock
	}
	return &MemStore{clk: clk, terms: make(map[string]memTerm)}
}

var _ interface {
	Store
	Reader
} = (*MemStore)(nil)

// Claim implements Store. It returns a *HeldError naming the holder while a
// term is live, even when that holder has the same name as the claimant.
func (m *MemStore) Claim(ctx context.Context, name, holder string, d time.Duration) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "claim lease %q", name)
	}
	switch {
	case name == "":
		return Grant{}, errors.NotValidf("empty lease name")
	case holder == "":
		return Grant{}, errors.NotValidf("empty holder for lease %q", name)
	case d <= 0:
		return Grant{}, errors.NotValidf("lease %q duration %v", name, d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if cur, ok := m.terms[name]; ok && now.Before(cur.expiry) {
		return Grant{}, &HeldError{Name: name, Holder: cur.grant.Holder}
	}
	m.last++
	g := Grant{Name: name, Holder: holder, Token: m.last, Duration: d}
	m.terms[name] = memTerm{grant: g, expiry: now.Add(d)}
	return g, nil
}

// Extend implements Store. It extends only the live term g.Token; it never
// shortens a term, and reports the time left from now as the Duration.
func (m *MemStore) Extend(ctx context.Context, g Grant, d time.Duration) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "extend lease %q", g.Name)
	}
	if d <= 0 {
		return Grant{}, errors.NotValidf("lease %q duration %v", g.Name, d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.live(g, now)
	if !ok {
		return Grant{}, ErrNotHeld
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
func (m *MemStore) Revoke(ctx context.Context, g Grant) error {
	if err := ctx.Err(); err != nil {
		return errors.Annotatef(err, "revoke lease %q", g.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live(g, m.clk.Now()); !ok {
		return ErrNotHeld
	}
	delete(m.terms, g.Name)
	return nil
}

// Holder implements Reader: the live term of the named lease, or ErrNotHeld
// when nobody holds it. The returned Duration is the time left.
func (m *MemStore) Holder(ctx context.Context, name string) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, errors.Annotatef(err, "read lease %q", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.terms[name]
	if !ok || !now.Before(cur.expiry) {
		return Grant{}, ErrNotHeld
	}
	out := cur.grant
	out.Duration = cur.expiry.Sub(now)
	return out, nil
}

// live returns the term g belongs to if it is still live at now.
func (m *MemStore) live(g Grant, now time.Time) (memTerm, bool) {
	cur, ok := m.terms[g.Name]
	if !ok || cur.grant.Token != g.Token || cur.grant.Holder != g.Holder || !now.Before(cur.expiry) {
		return memTerm{}, false
	}
	return cur, true
}
