// Package logtest is a capturing slog.Handler for the library's tests: it
// keeps every record, with its attributes flattened into a map, and lets a
// test wait for the records it expects without sleeping.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Record is a captured slog record.
type Record struct {
	Level   slog.Level
	Message string
	// Attrs holds every attribute, the handler's (WithAttrs) first, keyed
	// by name (group members as "group.name"), resolved.
	Attrs map[string]slog.Value
}

// String prints the record as slog's text handler would, roughly.
func (r Record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q", r.Level, r.Message)
	for k, v := range r.Attrs {
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	return b.String()
}

// Uint64 returns the attribute key as a uint64, failing t if it is
// missing or not one.
func (r Record) Uint64(t testing.TB, key string) uint64 {
	t.Helper()
	v, ok := r.Attrs[key]
	if !ok || v.Kind() != slog.KindUint64 {
		t.Fatalf("record %v: attribute %q is not a uint64", r, key)
	}
	return v.Uint64()
}

// Str returns the attribute key as a string (any kind, formatted), or ""
// if it is missing.
func (r Record) Str(key string) string {
	v, ok := r.Attrs[key]
	if !ok {
		return ""
	}
	return v.String()
}

// Handler captures records. The zero value is not usable: call New.
type Handler struct {
	s      *store
	attrs  []slog.Attr
	prefix string
}

type store struct {
	mu      sync.Mutex
	records []Record
	changed chan struct{} // closed and replaced on every record
	sealed  bool          // Seal was called: every later record is late
	late    []Record
}

// New returns an empty Handler capturing records at every level.
func New() *Handler {
	return &Handler{s: &store{changed: make(chan struct{})}}
}

// Logger returns a logger writing to h.
func (h *Handler) Logger() *slog.Logger { return slog.New(h) }

// Enabled implements slog.Handler: every level is captured.
func (h *Handler) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Message: r.Message, Attrs: make(map[string]slog.Value)}
	for _, a := range h.attrs {
		add(rec.Attrs, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(rec.Attrs, h.prefix, a)
		return true
	})
	h.s.mu.Lock()
	if h.s.sealed {
		h.s.late = append(h.s.late, rec)
	}
	h.s.records = append(h.s.records, rec)
	close(h.s.changed)
	h.s.changed = make(chan struct{})
	h.s.mu.Unlock()
	return nil
}

func add(m map[string]slog.Value, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, ga := range v.Group() {
			add(m, p, ga)
		}
		return
	}
	m[prefix+a.Key] = v
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = make([]slog.Attr, 0, len(h.attrs)+len(attrs))
	h2.attrs = append(h2.attrs, h.attrs...)
	for _, a := range attrs {
		h2.attrs = append(h2.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return &h2
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix += name + "."
	return &h2
}

// Records returns the records captured so far.
func (h *Handler) Records() []Record {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return slices.Clone(h.s.records)
}

// Matching returns the records captured so far with message msg.
func (h *Handler) Matching(msg string) []Record { return matching(h.Records(), msg) }

func matching(rs []Record, msg string) []Record {
	var out []Record
	for _, r := range rs {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

// Seal marks the moment the component writing to h has been closed (its
// Close has returned): nothing may be logged after it. A record that
// arrives later — from any goroutine, at any time before the test ends —
// fails t when the test ends, named in the failure (never through t.Log,
// which panics after the test). Call it once per Handler.
func (h *Handler) Seal(t testing.TB) {
	t.Helper()
	h.s.mu.Lock()
	h.s.sealed = true
	h.s.mu.Unlock()
	t.Cleanup(func() {
		if late := h.Late(); len(late) > 0 {
			t.Errorf("%d record(s) logged after Close: %v", len(late), late)
		}
	})
}

// Late returns the records captured after Seal.
func (h *Handler) Late() []Record {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return slices.Clone(h.s.late)
}

// guard bounds WaitMessage: reaching it is a failure, never part of the
// expected timing.
const guard = 5 * time.Second

// WaitMessage waits until n records with message msg have been captured,
// and returns those captured by then; it fails t after guard. It wakes on
// each new record.
func (h *Handler) WaitMessage(t testing.TB, msg string, n int) []Record {
	t.Helper()
	timeout := time.After(guard)
	for {
		h.s.mu.Lock()
		recs, changed := slices.Clone(h.s.records), h.s.changed
		h.s.mu.Unlock()
		if got := matching(recs, msg); len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no %d %q records in %d records after %v: %v", n, msg, len(recs), guard, recs)
			return nil
		}
	}
}
