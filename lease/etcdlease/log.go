package etcdlease

import (
	"context"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// What the stores log (WithLogger): the transitions of a SessionStore's
// session, once each — never a line per call, and no counts: those are in
// StoreReport (calls refused over capacity are its NotSent). No call's own
// path logs: each store call costs the counters' atomic adds, and nothing
// else, with or without a logger. Nothing logs once Close has returned.
const (
	msgSessionGranted     = "etcd session granted"
	msgSessionRecreated   = "etcd session re-created"
	msgSessionLost        = "etcd session lost"
	msgSessionRetired     = "etcd session retired"
	msgSessionUnconfirmed = "etcd session unconfirmed"
	msgSessionConfirmed   = "etcd session confirmed again"
)

// storeLog is a store's logger.
type storeLog struct {
	logger *slog.Logger // nil: no logs
}

// newStoreLog returns the log of a store of prefix with options o: every
// record carries the prefix, so that two stores of one process can be
// told apart.
func newStoreLog(o options, prefix string) storeLog {
	if o.logger == nil {
		return storeLog{}
	}
	return storeLog{logger: o.logger.With(slog.String("prefix", prefix))}
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
