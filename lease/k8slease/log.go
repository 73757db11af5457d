package k8slease

import (
	"context"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// What the Store logs (WithLogger): what it finds about a Lease, once each,
// never a line per call; the tracker's own records say what each lease did.
const (
	// A Claim took over a Lease whose holder stopped renewing it.
	msgTakenOver = "k8s lease taken over"
	// The Lease object the store last saw is gone.
	msgDeleted = "k8s lease deleted"
	// The Lease object was deleted and created again between two of the
	// store's calls: its leaseTransitions restarted.
	msgRecreated = "k8s lease re-created"
	// An Extend or a Revoke conflicted with another party's write, which
	// ended the term: another holder's term, a release, or a rewrite of
	// the term's record (its count, duration or times).
	msgEndedByOther = "k8s lease term ended by another writer"
)

// log makes one record, if the store has a logger. Its attributes come
// after namespace (the logger's) and lease.
func (s *Store) log(level slog.Level, msg, name string, attrs ...slog.Attr) {
	if s.logger == nil {
		return
	}
	s.logger.LogAttrs(context.Background(), level, msg, append([]slog.Attr{slog.String("lease", name)}, attrs...)...)
}

// logTakenOver records a Claim that took over prev, held by another
// holder's term the store saw unchanged for unchanged, as term g.
func (s *Store) logTakenOver(g leasestore.Grant, prev *coordinationv1.Lease, unchanged time.Duration) {
	s.log(slog.LevelInfo, msgTakenOver, g.Name, slog.String("holder", g.Holder), slog.Uint64("token", g.Token),
		slog.String("previous", holderOf(prev)), slog.Duration("unchanged", unchanged))
}

// logDeleted records that the Lease last seen as prev is gone.
func (s *Store) logDeleted(prev *coordinationv1.Lease) {
	s.log(slog.LevelWarn, msgDeleted, prev.Name, append(holderAttr(holderOf(prev)), slog.Uint64("token", tokenOf(prev)))...)
}

// logRecreated records that cur replaced the Lease object last seen as
// prev.
func (s *Store) logRecreated(prev, cur *coordinationv1.Lease) {
	s.log(slog.LevelWarn, msgRecreated, cur.Name, append(holderAttr(holderOf(cur)),
		slog.Uint64("token", tokenOf(cur)), slog.Uint64("previous_token", tokenOf(prev)))...)
}

// logEndedByOther records that op on term g conflicted with a write that
// ended the term: err is the NotHeldError op returns, naming who holds
// the Lease now.
func (s *Store) logEndedByOther(op leasestore.Op, g leasestore.Grant, err *leasestore.NotHeldError) {
	attrs := append([]slog.Attr{slog.String("op", op.String())}, holderAttr(err.Holder)...)
	s.log(slog.LevelWarn, msgEndedByOther, g.Name, append(attrs, slog.Uint64("token", g.Token), slog.Any("err", err))...)
}

// holderAttr is a record's holder attribute: none for a Lease with no
// holder.
func holderAttr(holder string) []slog.Attr {
	if holder == "" {
		return nil
	}
	return []slog.Attr{slog.String("holder", holder)}
}
