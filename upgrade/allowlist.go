package upgrade

import "fmt"

// Call names an RPC call for an Allowlist: a method of a service (a juju
// "facade"), at one version of the service or, with Version 0, at any.
type Call struct {
	Service string
	Version int
	Method  string
}

// Allowlist is the set of RPC calls a server keeps serving while it
// upgrades (status, login, the calls an upgrade itself needs). It is
// immutable and safe for concurrent use; a nil *Allowlist allows nothing. A
// server guards each call with one line:
//
//	if err := allowed.Check(gate, service, method); err != nil {
//		return err // the call is not executed
//	}
type Allowlist struct {
	calls map[Call]struct{}
}

// NewAllowlist returns an allowlist of calls. It panics on a call with an
// empty Service or Method or a negative Version: allowlists are written in
// code, and a typo there must not silently allow or refuse a call.
func NewAllowlist(calls ...Call) *Allowlist {
	a := &Allowlist{calls: make(map[Call]struct{}, len(calls))}
	for _, c := range calls {
		if c.Service == "" || c.Method == "" || c.Version < 0 {
			panic(fmt.Sprintf("upgrade.NewAllowlist: invalid call %+v: want a Service, a Method and a Version ≥ 0 (0 = any)", c))
		}
		a.calls[c] = struct{}{}
	}
	return a
}

// Allows reports whether the call is on the list: listed for this version
// or for any version (Version 0). Passing version 0 asks about entries for
// any version only.
func (a *Allowlist) Allows(service string, version int, method string) bool {
	if a == nil {
		return false
	}
	if _, ok := a.calls[Call{Service: service, Method: method}]; ok {
		return true
	}
	if version == 0 {
		return false
	}
	_, ok := a.calls[Call{Service: service, Version: version, Method: method}]
	return ok
}

// Check is the per-call guard for a call whose version does not matter: nil
// if the gate is complete or the call is allowlisted for any version,
// otherwise g.Err(). Use CheckVersion for versioned services.
func (a *Allowlist) Check(g *Gate, service, method string) error {
	return a.CheckVersion(g, service, 0, method)
}

// CheckVersion is Check for one version of the service.
func (a *Allowlist) CheckVersion(g *Gate, service string, version int, method string) error {
	err := g.Err()
	if err == nil || a.Allows(service, version, method) {
		return nil
	}
	return err
}
