//go:build linux

package etcdfault

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadTerms returns every term of the lease key as etcd's history records
// it, oldest first: a watch of the key from revision 1 (nothing compacts
// a test cluster). To know where the history ends it puts a marker key
// just after the lease key (key + "\x00", inside the watched range but no
// lease's key) and reads up to the marker's revision.
func ReadTerms(ctx context.Context, cli *clientv3.Client, key string) ([]Term, error) {
	marker := key + "\x00"
	put, err := cli.Put(ctx, marker, "end of history")
	if err != nil {
		return nil, fmt.Errorf("etcdfault: marking the end of %q's history: %w", key, err)
	}
	end := put.Header.Revision
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, key, clientv3.WithRange(key+"\x01"), clientv3.WithRev(1))
	var terms []Term
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return nil, fmt.Errorf("etcdfault: watching %q's history: %w", key, err)
		}
		for _, ev := range resp.Events {
			kv := ev.Kv
			if string(kv.Key) == marker {
				if kv.ModRevision >= end {
					return terms, nil
				}
				continue
			}
			switch {
			case ev.Type == mvccpb.DELETE:
				if n := len(terms); n > 0 && terms[n-1].End == 0 {
					terms[n-1].End = kv.ModRevision
				}
			case kv.CreateRevision == kv.ModRevision: // a new term
				if n := len(terms); n > 0 && terms[n-1].End == 0 {
					terms[n-1].End = kv.ModRevision // cannot happen: a key is created once until deleted
				}
				terms = append(terms, Term{Token: uint64(kv.CreateRevision), Holder: string(kv.Value)})
			}
		}
	}
	return nil, fmt.Errorf("etcdfault: watch of %q's history ended early: %w", key, ctx.Err())
}

// ReadApplied returns, for every key under prefix, the revision at which
// etcd applied it (each write has a key of its own).
func ReadApplied(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdfault: reading the writes under %q: %w", prefix, err)
	}
	applied := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		applied[string(kv.Key)] = kv.ModRevision
	}
	return applied, nil
}
