package etcdlease

// A group's step log: which of an HA group's upgrade steps are complete,
// recorded where every controller of the group sees it, fenced by the
// lease holder's token. Both stores keep it the same way (the upgrade
// package's StepLog, implemented structurally). See DESIGN.md, "The step
// log".

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	jujuerrors "github.com/juju/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// stepSep separates a lease name from a step in a step's key,
// prefix+name+stepSep+step: a lease name has no control character, so no
// lease's key holds it, and a step's key is never a lease's.
const stepSep = "\x00"

// isStepKey says whether name, a key under the prefix less the prefix, is
// a step's rather than a lease's.
func isStepKey(name string) bool { return strings.Contains(name, stepSep) }

// checkStepArgs checks the lease name of a step-log call.
func checkStepArgs(name string) error { return leasestore.CheckName("lease name", name) }

// stepsError is the error of a step-log call on the lease name that got
// no definitive answer: cause matches leasestore.ErrNotSent (nothing was
// sent) or leasestore.ErrUnconfirmed.
func stepsError(what, name string, token uint64, cause, err error) error {
	msg := fmt.Sprintf("etcdlease: %s of lease %q", what, name)
	if token != 0 {
		msg += fmt.Sprintf(" (token %d)", token)
	}
	return fmt.Errorf("%s: %w: %w", msg, cause, err)
}

// recordStep records step complete for the group of the lease name, in one
// transaction, only if the lease's key still has the create revision token
// (the fence): a put of the step's key if absent, so the first record of a
// step stays, with the token that recorded it as its value. A failed fence
// is the *leasestore.NotHeldError of the term token, naming the holder of
// the term that followed it, if any.
func recordStep(ctx context.Context, cli *clientv3.Client, prefix, name string, token uint64, step string) error {
	key, stepKey := prefix+name, prefix+name+stepSep+step
	resp, err := cli.Txn(ctx).
		If(fence(prefix, name, token)).
		Then(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(stepKey), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(stepKey, strconv.FormatUint(token, 10))}, nil)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return stepsError("record step "+quote(step), name, token, leasestore.ErrUnconfirmed, err)
	}
	if resp.Succeeded {
		return nil
	}
	why, holder := termRecord(leasestore.Grant{Name: name, Token: token}, elseKV(resp), nil)
	if why == "" {
		why = "term over" // the fence of an invalid token: no term has it
	}
	return &leasestore.NotHeldError{Name: name, Holder: holder, Token: token, Reason: "record step " + quote(step) + ": " + why}
}

// stepsDone reads the steps recorded for the group of the lease name, in
// the order they were recorded (their keys' create revisions), leaving out
// keys whose step is no valid name.
func stepsDone(ctx context.Context, cli *clientv3.Client, prefix, name string) ([]string, error) {
	from := prefix + name + stepSep
	resp, err := cli.Get(ctx, from, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, stepsError("steps done", name, 0, leasestore.ErrUnconfirmed, err)
	}
	steps := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		// A key whose step is no valid name was written by another
		// client: RecordStep writes none.
		if step := strings.TrimPrefix(string(kv.Key), from); leasestore.CheckName("step", step) == nil {
			steps = append(steps, step)
		}
	}
	return steps, nil
}

// RecordStep records step complete for the HA group led through the
// lease name, only while token is still the fencing token of that lease's
// term: one etcd transaction, guarded by Fence(name, token), puts the
// step's key (prefix+name, a NUL, the step; no etcd lease: the record
// outlives terms) if it is absent. Recording a step twice is not an error.
// A deposed holder's record (another term created the key, or it is gone)
// is refused, with nothing recorded, by a *leasestore.NotHeldError
// (matching leasestore.ErrNotHeld) naming the holder now if any; a name
// or step that is no valid name, or token 0, gives an error matching
// errors.NotValid; any other error matches leasestore.ErrUnconfirmed (or
// leasestore.ErrNotSent if it was not sent).
func (s *Store) RecordStep(ctx context.Context, name string, token uint64, step string) error {
	if err := checkStepToken(name, token, step); err != nil {
		return err
	}
	if err := s.slots.acquire(ctx); err != nil {
		return stepsError("record step "+quote(step), name, token, leasestore.ErrNotSent, err)
	}
	defer s.slots.release()
	return recordStep(ctx, s.cli, s.prefix, name, token, step)
}

// StepsDone returns the steps recorded complete for the group led through
// the lease name, in the order they were recorded (a linearizable read).
// An invalid name gives an error matching errors.NotValid; any other error
// matches leasestore.ErrUnconfirmed (or leasestore.ErrNotSent).
func (s *Store) StepsDone(ctx context.Context, name string) ([]string, error) {
	if err := checkStepArgs(name); err != nil {
		return nil, err
	}
	if err := s.slots.acquire(ctx); err != nil {
		return nil, stepsError("steps done", name, 0, leasestore.ErrNotSent, err)
	}
	defer s.slots.release()
	return stepsDone(ctx, s.cli, s.prefix, name)
}

// RecordStep records step complete for the group of the lease name, as
// Store.RecordStep does (the keys are the same). After Close it fails
// with an error matching leasestore.ErrNotSent.
func (s *SessionStore) RecordStep(ctx context.Context, name string, token uint64, step string) error {
	if err := checkStepToken(name, token, step); err != nil {
		return err
	}
	if s.isClosed() {
		return stepsError("record step "+quote(step), name, token, leasestore.ErrNotSent, errClosed)
	}
	if err := s.slots.acquire(ctx); err != nil {
		return stepsError("record step "+quote(step), name, token, leasestore.ErrNotSent, err)
	}
	defer s.slots.release()
	return recordStep(ctx, s.cli, s.prefix, name, token, step)
}

// StepsDone returns the steps recorded complete for the group of the
// lease name, as Store.StepsDone does. After Close it fails with an error
// matching leasestore.ErrNotSent.
func (s *SessionStore) StepsDone(ctx context.Context, name string) ([]string, error) {
	if err := checkStepArgs(name); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, stepsError("steps done", name, 0, leasestore.ErrNotSent, errClosed)
	}
	if err := s.slots.acquire(ctx); err != nil {
		return nil, stepsError("steps done", name, 0, leasestore.ErrNotSent, err)
	}
	defer s.slots.release()
	return stepsDone(ctx, s.cli, s.prefix, name)
}

// checkStepToken checks RecordStep's arguments.
func checkStepToken(name string, token uint64, step string) error {
	if err := checkStepArgs(name); err != nil {
		return err
	}
	if err := leasestore.CheckName("step", step); err != nil {
		return err
	}
	if token == 0 {
		return jujuerrors.NotValidf("token 0 (must be the fencing token of a term of %q)", name)
	}
	return nil
}
