package etcdlease

import (
	"errors"
	"strings"
	"testing"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// FuzzKeyRecord feeds the readers of a lease's key — termRecord (through
// recordedTerm), which every path that confirms a term asks, and heldTerm,
// which Holder reports from — keys as any client of etcd could leave
// them. Neither may panic; a key that records a term must name a holder
// Claim would take, with a token etcd could give; every refusal is a
// single bounded line, whatever the value.
func FuzzKeyRecord(f *testing.F) {
	f.Add(true, int64(10), int64(0x51), []byte("a"), "a", uint64(10), int64(0x51))
	f.Add(true, int64(10), int64(0x51), []byte("intruder"), "a", uint64(10), int64(0))
	f.Add(true, int64(10), int64(0), []byte("a"), "a", uint64(10), int64(0))
	f.Add(true, int64(10), int64(0x77), []byte("a"), "a", uint64(10), int64(0x51))
	f.Add(true, int64(12), int64(0x51), []byte("b"), "a", uint64(10), int64(0x51))
	f.Add(true, int64(10), int64(0x51), []byte(""), "a", uint64(10), int64(0))
	f.Add(true, int64(-1), int64(0x51), []byte("a"), "a", uint64(1<<64-1), int64(0))
	f.Add(false, int64(0), int64(0), []byte(nil), "a", uint64(10), int64(0))
	f.Add(true, int64(10), int64(0x51), []byte("\n[+]forged ok\n"), "", uint64(10), int64(0))
	f.Fuzz(func(t *testing.T, present bool, create, id int64, value []byte, holder string, token uint64, ours int64) {
		var kv *keyValue
		if present {
			kv = &keyValue{CreateRevision: create, Lease: id, Value: value}
		}
		checkLine := func(what string, err error) {
			t.Helper()
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") || len(msg) > 2048 {
				t.Fatalf("%s: not one bounded line (%d bytes): %q", what, len(msg), msg)
			}
		}

		g, err := heldTerm("x", kv)
		if err == nil {
			switch {
			case checkHolder(g.Holder) != nil, g.Holder != string(value):
				t.Fatalf("Holder reports holder %q from value %q", g.Holder, value)
			case g.Token == 0, g.Token != uint64(create), create <= 0:
				t.Fatalf("Holder reports token %d from create revision %d", g.Token, create)
			case id == 0:
				t.Fatal("Holder reports a key with no etcd lease as a term")
			case g.Name != "x" || g.Duration != 0:
				t.Fatalf("Holder reports %+v", g)
			}
		} else {
			checkLine("heldTerm", err)
			if !present && !errors.Is(err, leasestore.ErrNotHeld) {
				t.Fatalf("an absent key is not ErrNotHeld: %v", err)
			}
		}

		var oursFn func(int64) bool
		if ours != 0 {
			oursFn = func(l int64) bool { return l == ours }
		}
		grant := leasestore.Grant{Name: "x", Holder: holder, Token: token}
		err = recordedTerm(leasestore.OpExtend, grant, kv, oursFn)
		records := present && create > 0 && uint64(create) == token && checkHolder(string(value)) == nil &&
			string(value) == holder && id != 0 && (oursFn == nil || id == ours)
		if err == nil {
			if !records {
				t.Fatalf("key %+v taken for the term %+v (ours %x)", kv, grant, ours)
			}
			return
		}
		if records {
			t.Fatalf("key %+v refused for the term %+v it records (ours %x): %v", kv, grant, ours, err)
		}
		var nh *leasestore.NotHeldError
		if !errors.As(err, &nh) {
			t.Fatalf("not a *leasestore.NotHeldError: %v", err)
		}
		if nh.Name != "x" || nh.Token != token || nh.Reason == "" || len(nh.Holder) > maxNamed {
			t.Fatalf("refusal %+v", nh)
		}
		if nh.Holder != "" && checkHolder(nh.Holder) != nil {
			t.Fatalf("refusal names an invalid holder: %+v", nh)
		}
		checkLine("recordedTerm", err)
	})
}
