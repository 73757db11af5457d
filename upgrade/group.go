package upgrade

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/juju/clock"
	jujuerrors "github.com/juju/errors"
)

// A StepLog records which of an HA group's upgrade steps are complete, where every
// controller of the group sees it, fenced by the lease holder's token.
type StepLog interface {
	// StepsDone returns the steps recorded complete for the group led
	// through lease name, in the order they were recorded.
	StepsDone(ctx context.Context, lease string) ([]string, error)
	// RecordStep records step complete for lease name's group, only if token
	// is still the fencing token of that lease's current term: a deposed
	// holder's record is refused with an error (matching leasestore.ErrNotHeld
	// when the store knows the term is over; ambiguous errors stay ambiguous)
	// and nothing is recorded. Recording a step twice is not an error.
	RecordStep(ctx context.Context, lease string, token uint64, step string) error
}

// Step is one upgrade step of an HA group. Run must be idempotent: a
// leader that dies after running a step and before recording it is
// succeeded by one that runs it again.
type Step struct {
	// Name names the step in the StepLog, e.g. "4.0.1/schema-7".
	Name string
	// Run does the step under token, the fencing token of the lease
	// holder's term: pass it to whatever the step writes.
	Run func(ctx context.Context, token uint64) error
}

// GroupConfig is an HA group's upgrade, the same on every controller.
type GroupConfig struct {
	// Log is where the steps are recorded complete, fenced by Lease's
	// tokens (leasestore.MemStore; etcdlease's stores).
	Log StepLog
	// Lease names the lease whose holder runs the steps.
	Lease string
	// Steps run in this order; their names must be distinct and not empty.
	Steps []Step
	// Poll is how often Wait reads Log for steps another controller
	// recorded. Zero means 1 s.
	Poll time.Duration
	// Leader, if not nil, names the lease's holder for the gate's Detail
	// ("waiting for controller-1 to finish step 3/5 (schema-7)"); nil or
	// "" reads "the leader".
	Leader func() string
}

const (
	defaultPoll = time.Second
	// minFitRetryAfter bounds the RetryAfter Wait sizes by the steps left.
	minFitRetryAfter = 100 * time.Millisecond
)

// Group is an upgrade run once for an HA group. Every controller makes
// one on its own gate (Gate.Group) and calls Wait, which holds the gate
// until the StepLog shows every step complete; the lease's holder, in its
// Lead function, calls Lead, which runs the unfinished steps under its
// fencing token and records each. A successor runs the steps its
// predecessor did not record; a deposed holder's record is refused by the
// token. A Group is safe for concurrent use.
type Group struct {
	g   *Gate
	cfg GroupConfig

	mu      sync.Mutex // guards the fields below
	done    map[string]bool
	running int           // the step this process runs as the leader; -1 when none
	token   uint64        // the token it runs under
	deposed error         // why this process's last record was refused; nil if none
	failed  error         // a step's own error under this process's lead
	readErr error         // Wait's last read of the log; nil if it answered
	changed chan struct{} // closed and replaced at each change of the above
}

// Group returns the HA group's upgrade cfg behind g. A cfg without a Log,
// a Lease or Steps, with a step without a Name or a Run, two steps of one
// name, or a negative Poll is refused with an error matching
// errors.NotValid (github.com/juju/errors).
func (g *Gate) Group(cfg GroupConfig) (*Group, error) {
	switch {
	case cfg.Log == nil:
		return nil, jujuerrors.NotValidf("nil Log (must be a StepLog)")
	case cfg.Lease == "":
		return nil, jujuerrors.NotValidf("empty Lease (must name the lease whose holder runs the steps)")
	case len(cfg.Steps) == 0:
		return nil, jujuerrors.NotValidf("no Steps (must be at least one)")
	case cfg.Poll < 0:
		return nil, jujuerrors.NotValidf("Poll %v (must be positive, or zero for 1s)", cfg.Poll)
	}
	seen := make(map[string]bool, len(cfg.Steps))
	for i, s := range cfg.Steps {
		switch {
		case s.Name == "" || seen[s.Name]:
			return nil, jujuerrors.NotValidf("Steps[%d].Name %q (must be distinct and not empty)", i, s.Name)
		case s.Run == nil:
			return nil, jujuerrors.NotValidf("Steps[%d].Run nil (must be the step's func)", i)
		}
		seen[s.Name] = true
	}
	if cfg.Poll == 0 {
		cfg.Poll = defaultPoll
	}
	cfg.Steps = append([]Step(nil), cfg.Steps...)
	return &Group{g: g, cfg: cfg, done: make(map[string]bool), running: -1, changed: make(chan struct{})}, nil
}

// update changes the group's state in f and wakes Wait.
func (u *Group) update(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f()
	close(u.changed)
	u.changed = make(chan struct{})
}

// step names step i for people: "step 3/5 (schema-7)".
func (u *Group) step(i int) string {
	return fmt.Sprintf("step %d/%d (%s)", i+1, len(u.cfg.Steps), u.cfg.Steps[i].Name)
}

// Lead runs the group's unfinished steps in order under token, the
// fencing token of this controller's term of the lease, recording each in
// the log once it has run, and returns nil once every step is recorded.
// Call it from the lease's Lead function:
//
//	err := tr.Lead(ctx, func(ctx context.Context, st lease.Status) error {
//		return grp.Lead(ctx, st.Token)
//	})
//
// It returns a step's own error ("step 3/5 (schema-7): disk full"), with
// which this controller's Wait fails its gate; the log's error when a
// record is refused (a deposed leader's matches leasestore.ErrNotHeld),
// which the gate's Detail shows while it waits for the new leader; and
// ctx's error when ctx ends (a step stopped has not failed). Token 0 is
// not valid.
func (u *Group) Lead(ctx context.Context, token uint64) error {
	if token == 0 {
		return jujuerrors.NotValidf("token 0 (must be the lease holder's fencing token)")
	}
	done, err := u.cfg.Log.StepsDone(ctx, u.cfg.Lease)
	if err != nil {
		return fmt.Errorf("upgrade: read the steps of lease %q: %w", u.cfg.Lease, err)
	}
	u.update(func() {
		u.deposed = nil
		for _, s := range done {
			u.done[s] = true
		}
	})
	defer u.update(func() { u.running = -1 })
	for i, s := range u.cfg.Steps {
		u.mu.Lock()
		ran := u.done[s.Name]
		u.mu.Unlock()
		if ran {
			continue
		}
		u.update(func() { u.running, u.token = i, token })
		if err := s.Run(ctx, token); err != nil {
			err = fmt.Errorf("%s: %w", u.step(i), err)
			if ctx.Err() == nil {
				u.update(func() { u.failed = err })
			}
			return err
		}
		if err := u.cfg.Log.RecordStep(ctx, u.cfg.Lease, token, s.Name); err != nil {
			err = fmt.Errorf("%s ran under token %d but was not recorded: %w", u.step(i), token, err)
			if ctx.Err() == nil {
				u.update(func() { u.deposed = err })
			}
			return err
		}
		u.update(func() { u.done[s.Name] = true })
	}
	return nil
}

// Wait runs the gate's upgrade (RunSteps) until the log shows every step
// complete, reading it every Poll on the gate's clock and at once when
// this process's Lead records a step. Meanwhile the gate's Detail says
// which step it waits for and on whom, and its RetryAfter is sized by the
// steps left (the time per step seen so far × the steps left, at least
// 100 ms; put back when Wait returns), so that remote clients come back
// about when the upgrade ends (a local one wakes on the gate:
// WithWake(g.Completed)).
//
// It returns nil once every step is complete; a step's own error under
// this process's Lead, with which it fails the gate; and, when ctx ends
// first, an error matching ctx's that says what it waited for, the
// upgrade left in progress.
func (u *Group) Wait(ctx context.Context) error { return u.g.RunSteps(ctx, u.wait) }

func (u *Group) wait(ctx context.Context) error {
	g := u.g
	g.mu.Lock()
	base := g.retryAfter
	g.mu.Unlock()
	defer func() { _ = g.SetRetryAfter(base) }()
	g.group.Store(u)
	var (
		t     clock.Timer // armed after the first read; re-armed after each firing
		fired bool
		since time.Time // when Wait first read the log, and the steps then done
		first = -1
	)
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		done, readErr := u.cfg.Log.StepsDone(ctx, u.cfg.Lease)
		u.mu.Lock()
		for _, s := range done {
			u.done[s] = true
		}
		if ctx.Err() == nil {
			u.readErr = readErr
		}
		n, failed, changed := u.doneLocked(), u.failed, u.changed
		u.mu.Unlock()
		switch now := g.clk.Now(); {
		case failed != nil:
			return failed
		case n == len(u.cfg.Steps):
			return nil
		case first < 0:
			since, first = now, n
		case n > first: // size the wait by the steps left
			perStep := now.Sub(since) / time.Duration(n-first)
			_ = g.SetRetryAfter(max(perStep*time.Duration(len(u.cfg.Steps)-n), minFitRetryAfter))
		}
		if t == nil {
			t = g.clk.NewTimer(u.cfg.Poll)
		} else if fired {
			t.Reset(u.cfg.Poll)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", u.detail(), ctx.Err())
		case <-changed:
			fired = false
		case <-t.Chan():
			fired = true
		}
	}
}

// doneLocked counts the steps done; u.mu is held.
func (u *Group) doneLocked() int {
	n := 0
	for _, s := range u.cfg.Steps {
		if u.done[s.Name] {
			n++
		}
	}
	return n
}

// detail is the gate's Detail while Wait runs: which step, and whom, the
// group waits for.
func (u *Group) detail() string {
	who := "the leader"
	if u.cfg.Leader != nil {
		if l := u.cfg.Leader(); l != "" {
			who = l
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	next := -1 // the first step not done
	for i := len(u.cfg.Steps) - 1; i >= 0; i-- {
		if !u.done[u.cfg.Steps[i].Name] {
			next = i
		}
	}
	var d string
	switch {
	case next < 0:
		return "all " + strconv.Itoa(len(u.cfg.Steps)) + " steps done"
	case u.running >= 0:
		d = fmt.Sprintf("running %s as the leader (token %d)", u.step(u.running), u.token)
	case u.deposed != nil:
		d = fmt.Sprintf("deposed: %v; waiting for %s to finish %s", u.deposed, who, u.step(next))
	default:
		d = fmt.Sprintf("waiting for %s to finish %s", who, u.step(next))
	}
	if u.readErr != nil {
		d += fmt.Sprintf("; the step log did not answer: %v", u.readErr)
	}
	return d
}
