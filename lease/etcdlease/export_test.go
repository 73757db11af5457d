package etcdlease

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// AddOrphan records id as the etcd lease of a claim whose outcome was
// unconfirmed, as Claim does when its transaction fails ambiguously.
func AddOrphan(s *Store, id clientv3.LeaseID) { s.addOrphan(id) }

// LostWithProgress is Lost, with f told the revision up to which the watch
// has seen every event of the key.
func LostWithProgress(ctx context.Context, s *Store, g lease.Grant, f func(rev int64)) <-chan struct{} {
	return s.lost(ctx, g, f)
}
