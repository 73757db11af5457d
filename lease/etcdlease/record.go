package etcdlease

// A lease's key as the stores read it, and what it says of a term. The
// key is outside input: any client of the cluster may write it. A term is
// ours only while its key records it — created at the term's token (its
// create revision), its value naming the term's holder, on an etcd lease
// the store put it on — so every path that confirms a term or reports a
// holder reads the key through these functions (FuzzKeyRecord).

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// keyValue is the part of a key's state the stores read.
type keyValue struct {
	CreateRevision int64
	Lease          int64
	Value          []byte
}

func newKeyValue(kv *mvccpb.KeyValue) *keyValue {
	return &keyValue{CreateRevision: kv.CreateRevision, Lease: kv.Lease, Value: kv.Value}
}

// recordedTerm says whether kv, the key of g's lease as read (nil when it
// is absent), records the term g: nil when it does, else the
// *leasestore.NotHeldError of op saying what was seen (see termRecord).
func recordedTerm(op leasestore.Op, g leasestore.Grant, kv *keyValue, ours func(id int64) bool) error {
	if why, holder := termRecord(g, kv, ours); why != "" {
		return termEnded(op, g, holder, why)
	}
	return nil
}

// recordEnded is the loss of the term g, which the store found over, as
// its key was read (kv; nil when it is absent).
func recordEnded(op leasestore.Op, g leasestore.Grant, kv *keyValue) error {
	if err := recordedTerm(op, g, kv, nil); err != nil {
		return err
	}
	return termEnded(op, g, "", "term over")
}

// termRecord is why kv, the key of g's lease as read (nil when absent),
// does not record the term g, and whom the key names now (namedHolder:
// the holder of another term, or the one a rewritten value names; empty
// otherwise). why is empty when kv records g: it was created at g.Token,
// its value names g.Holder, and it is on an etcd lease — when ours is not
// nil, one that ours says the store put it on. Neither store ever writes
// a key without an etcd lease or with a value that names no holder: such
// a key was written by another client.
func termRecord(g leasestore.Grant, kv *keyValue, ours func(id int64) bool) (why, now string) {
	if kv == nil {
		return "key gone", ""
	}
	value, named := string(kv.Value), namedHolder(kv.Value)
	switch {
	case kv.CreateRevision <= 0 || uint64(kv.CreateRevision) != g.Token:
		if kv.CreateRevision > 0 && uint64(kv.CreateRevision) > g.Token {
			return fmt.Sprintf("key created again at revision %d", kv.CreateRevision), named
		}
		return fmt.Sprintf("key of another term (created at revision %d)", kv.CreateRevision), named
	case value == "":
		return "key rewritten: value names no holder", ""
	case value != g.Holder:
		return "key rewritten: value names " + quote(value), named
	case checkHolder(value) != nil: // a grant no Claim of this store made
		return "key value " + quote(value) + " is no holder's name", ""
	}
	// The key names g's holder, but an etcd lease not ours keeps it: it
	// is no term of g's, whoever it names.
	switch {
	case kv.Lease == 0:
		return "key has no etcd lease: written by another client", ""
	case ours != nil && !ours(kv.Lease):
		return movedTo(kv.Lease), ""
	}
	return "", ""
}

// movedTo is why a key naming its term's holder, on the etcd lease id,
// which the store did not put it on, records no term of ours.
func movedTo(id int64) string {
	return fmt.Sprintf("key moved to etcd lease %x: written by another client", id)
}

// movedAway is the loss of the term g whose key, as read (kv), another
// client moved to an etcd lease the store did not put it on.
func movedAway(op leasestore.Op, g leasestore.Grant, kv *keyValue) error {
	return termEnded(op, g, "", movedTo(kv.Lease))
}

// heldTerm reads kv, the key of the lease name (nil when absent), as the
// live term Store.Holder reports: its holder (the value) and token (the
// create revision), without a Duration. A key that records no term is
// not reported as one: absent, it is nobody's (an error matching
// leasestore.ErrNotHeld); naming no holder or on no etcd lease, it was written
// by another client, and claims are refused while it exists (an error
// matching leasestore.ErrHeld, as a Claim's refusal does).
func heldTerm(name string, kv *keyValue) (leasestore.Grant, error) {
	switch {
	case kv == nil:
		return leasestore.Grant{}, fmt.Errorf("etcdlease: lease %q: nobody holds it: %w", name, leasestore.ErrNotHeld)
	case kv.CreateRevision <= 0:
		// etcd gives every key a positive create revision.
		return leasestore.Grant{}, fmt.Errorf("etcdlease: lease %q: key read with create revision %d", name, kv.CreateRevision)
	case len(kv.Value) == 0:
		return leasestore.Grant{}, fmt.Errorf("etcdlease: lease %q: key names no holder: written by another client (claims are refused while it exists): %w",
			name, leasestore.ErrHeld)
	case checkHolder(string(kv.Value)) != nil:
		return leasestore.Grant{}, fmt.Errorf("etcdlease: lease %q: key names %s, no holder's name: written by another client (claims are refused while it exists): %w",
			name, quote(string(kv.Value)), leasestore.ErrHeld)
	case kv.Lease == 0:
		return leasestore.Grant{}, fmt.Errorf("etcdlease: lease %q: key has no etcd lease: written by another client, naming %s (claims are refused while it exists): %w",
			name, quote(string(kv.Value)), leasestore.ErrHeld)
	}
	return leasestore.Grant{Name: name, Holder: string(kv.Value), Token: uint64(kv.CreateRevision)}, nil
}

// namedHolder is the holder a key's value names, as a refusal or a loss
// names it (HeldError.Holder, NotHeldError.Holder, which a tracker's
// status and errors repeat whole): the value, if it is a holder Claim
// would take of at most maxNamed bytes; else empty (not known).
func namedHolder(value []byte) string {
	if len(value) > maxNamed || checkHolder(string(value)) != nil {
		return ""
	}
	return string(value)
}

// maxQuoted is how many bytes of a value read from etcd an error quotes;
// maxNamed, the longest value a *leasestore.NotHeldError names as the holder
// now (its Holder, which a tracker's status and errors repeat whole).
const (
	maxQuoted = 64
	maxNamed  = 256
)

// quote is s quoted (control characters escaped), cut to maxQuoted bytes:
// a value written by another client may be anything, of any size (etcd
// takes up to 1.5 MiB).
func quote(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:maxQuoted], len(s))
}
