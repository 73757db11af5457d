package etcdlease

import clientv3 "go.etcd.io/etcd/client/v3"

// AddOrphan records id as the etcd lease of a claim whose outcome was
// unconfirmed, as Claim does when its transaction fails ambiguously.
func AddOrphan(s *Store, id clientv3.LeaseID) { s.addOrphan(id) }
