package etcdlease

import (
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fence is the compare of both stores' Fence: the key prefix+name still
// has the create revision token, as etcd's concurrency.Mutex.IsOwner
// checks for its own keys. A name or token that no term can have (an empty
// name, token 0, one beyond etcd's int64 revisions) gives a compare that
// never holds: a fence fails closed. See DESIGN.md, "Fencing".
func fence(prefix, name string, token uint64) clientv3.Cmp {
	key := prefix + name
	if name == "" || token == 0 || token > math.MaxInt64 {
		return clientv3.Compare(clientv3.CreateRevision(key), "<", 0) // revisions are never negative
	}
	return clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))
}

// Fence returns a compare for the caller's own etcd transaction that holds
// only while the term of the named lease with fencing token token still
// holds its key — the lease analogue of etcd's concurrency.Mutex.IsOwner:
//
//	st, err := tr.Check(ctx, 0) // Held, with st.Token
//	...
//	resp, err := cli.Txn(ctx).
//		If(store.Fence("singular", st.Token)).
//		Then(clientv3.OpPut("/myapp/config", cfg)).
//		Commit()
//	// !resp.Succeeded: the term is over; the write was not applied.
//
// A leader paused past its term that wakes up and writes is refused once
// another term has taken the key. An empty name, token 0 or a token beyond
// int64 gives a compare that never holds. See DESIGN.md, "Fencing".
func (s *Store) Fence(name string, token uint64) clientv3.Cmp {
	return fence(s.prefix, name, token)
}

// Fence returns a compare for the caller's own etcd transaction that holds
// only while the term of the named lease with fencing token token still
// holds its key, as Store.Fence does (the keys and tokens are the same).
// A term its holder abandoned keeps its key, and so its fence, until the
// store deletes it (within about a second), or the session expires;
// another term never holds the lease meanwhile.
func (s *SessionStore) Fence(name string, token uint64) clientv3.Cmp {
	return fence(s.prefix, name, token)
}
