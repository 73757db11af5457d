package etcdlease

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/internal/logcount"
)

// What the stores log (WithLogger): the transitions of a SessionStore's
// session, once each, and per-call events as counts — calls refused over
// capacity (internal/logcount: one record per interval while they occur),
// keys a SessionStore deleted itself (one record per expiry round that
// deleted any). No call's own path logs: each store call costs the
// counters' atomic adds, and nothing else, with or without a logger.
const (
	msgOverCapacity       = "etcd lease calls refused over capacity"
	msgSessionGranted     = "etcd session granted"
	msgSessionRecreated   = "etcd session re-created"
	msgSessionLost        = "etcd session lost"
	msgSessionRetired     = "etcd session retired"
	msgSessionUnconfirmed = "etcd session unconfirmed"
	msgSessionConfirmed   = "etcd session confirmed again"
	msgKeysDeleted        = "etcd lease keys deleted by the store"
)

// storeLog is a store's logger and the counter of its calls refused over
// capacity, which the call slots count.
type storeLog struct {
	logger       *slog.Logger // nil: no logs
	agg          *logcount.Aggregator
	overCapacity *logcount.Counter
}

// newStoreLog returns the log of a store of prefix with options o: every
// record carries the prefix, so that two stores of one process can be
// told apart.
func newStoreLog(o options, prefix string) storeLog {
	logger := o.logger
	if logger != nil {
		logger = logger.With(slog.String("prefix", prefix))
	}
	agg := logcount.New(logcount.Config{Logger: logger, Clock: o.clock})
	g := agg.Group(slog.LevelWarn, msgOverCapacity, slog.Int("max_in_flight", o.maxInFlight))
	return storeLog{logger: logger, agg: agg, overCapacity: g.Counter("refused")}
}

// log makes one record, if there is a logger.
func (l storeLog) log(level slog.Level, msg string, attrs ...slog.Attr) {
	if l.logger != nil {
		l.logger.LogAttrs(context.Background(), level, msg, attrs...)
	}
}

// sessionAttr names a session by its etcd lease ID, in hex as etcdctl
// prints it.
func sessionAttr(id clientv3.LeaseID) slog.Attr {
	return slog.String("session", fmt.Sprintf("%x", int64(id)))
}

// deletedKeys counts the keys a SessionStore deleted itself since its
// last record of them: orphans (put on its session, but no holder was
// ever granted them: an unconfirmed claim's put applied after all) and
// the keys of terms their holders abandoned.
type deletedKeys struct{ orphans, abandoned atomic.Uint64 }

// add counts the deletion of the key of t.
func (d *deletedKeys) add(t *term) {
	if t.promised {
		d.abandoned.Add(1)
	} else {
		d.orphans.Add(1)
	}
}

// logSince makes one record of the deletions counted since the last one,
// if there were any.
func (d *deletedKeys) logSince(l storeLog) {
	orphans, abandoned := d.orphans.Swap(0), d.abandoned.Swap(0)
	if orphans+abandoned > 0 {
		l.log(slog.LevelInfo, msgKeysDeleted, slog.Uint64("orphans", orphans), slog.Uint64("abandoned", abandoned))
	}
}
