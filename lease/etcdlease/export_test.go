package etcdlease

import clientv3 "go.etcd.io/etcd/client/v3"

// AddOrphan records id as the etcd lease of a claim whose outcome was
// unconfirmed, as Claim does when its transaction fails ambiguously.
func AddOrphan(s *Store, id clientv3.LeaseID) { s.addOrphan(id) }

// SetWatchProgress makes every Lost watcher of s call f with the revision up
// to which it has seen its key's events. Set it before calling Lost.
func SetWatchProgress(s *Store, f func(rev int64)) { s.watchProgress = f }
