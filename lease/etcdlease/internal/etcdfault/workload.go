//go:build linux

package etcdfault

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coldstart-go/coldstart/lease"
)

// Node is one party under test: a tracker of the lease, and the client of
// its own member that it writes through.
type Node struct {
	Name    string // the tracker's Holder
	Tracker *lease.Tracker
	Client  *clientv3.Client
}

// WorkloadConfig says how nodes are observed.
type WorkloadConfig struct {
	// Key is the lease's etcd key; a fenced write compares its create
	// revision with the token it was promised.
	Key string
	// WritePrefix is where nodes write while promised the lease (one
	// unfenced put and one fenced put per WriteEvery); empty means no
	// writes.
	WritePrefix string
	// Poll is the interval between checks while the last answer was Held
	// or NotHeld (answered from the tracker's cache); zero means 5ms.
	Poll time.Duration
	// SlowPoll is the interval while the last answer was Unknown: such a
	// check starts a store call at once, so polling faster would drive the
	// tracker harder than its own retries do; zero means 100ms.
	SlowPoll time.Duration
	// CheckTimeout bounds each check; zero means 2s.
	CheckTimeout time.Duration
	// WriteEvery is the interval between a node's writes; zero means 100ms.
	WriteEvery time.Duration
}

func (c WorkloadConfig) withDefaults() WorkloadConfig {
	c.Poll = cmp.Or(c.Poll, 5*time.Millisecond)
	c.SlowPoll = cmp.Or(c.SlowPoll, 100*time.Millisecond)
	c.CheckTimeout = cmp.Or(c.CheckTimeout, 2*time.Second)
	c.WriteEvery = cmp.Or(c.WriteEvery, 100*time.Millisecond)
	return c
}

// Workload checks every node's tracker over and over, recording each
// answer with the times on this process's monotonic clock (one process,
// one clock: the trackers' Until is on it too), and makes the writes.
type Workload struct {
	cfg    WorkloadConfig
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	nodes  []*observed
}

type observed struct {
	Node
	latest atomic.Pointer[Answer] // the latest answer

	mu      sync.Mutex // guards answers and writes
	answers []Answer
	writes  []Write
}

// Observe starts checking and writing for each node until Stop.
func Observe(nodes []Node, cfg WorkloadConfig) *Workload {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{cfg: cfg, start: time.Now(), cancel: cancel}
	for _, n := range nodes {
		o := &observed{Node: n}
		w.nodes = append(w.nodes, o)
		w.wg.Go(func() { w.poll(ctx, o) })
		if cfg.WritePrefix != "" {
			w.wg.Go(func() { w.write(ctx, o) })
		}
	}
	return w
}

func (w *Workload) poll(ctx context.Context, o *observed) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CheckTimeout)
		asked := time.Now()
		st, err := o.Tracker.Check(cctx, 0)
		at := time.Now()
		cancel()
		if ctx.Err() != nil {
			return // the answer to a check cut by Stop says nothing
		}
		o.record(asked, at, st, err)
		if st.State == lease.Unknown {
			timer.Reset(w.cfg.SlowPoll)
		} else {
			timer.Reset(w.cfg.Poll)
		}
	}
}

// record adds an answer; an answer equal to the node's latest extends it.
func (o *observed) record(asked, at time.Time, st lease.Status, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := Answer{Node: o.Name, Status: st, Err: err, Class: classOf(err),
		FirstAsked: asked, First: at, LastAsked: asked, Last: at, Count: 1}
	if n := len(o.answers); n > 0 && o.answers[n-1].same(a) {
		last := &o.answers[n-1]
		last.LastAsked, last.Last = asked, at
		last.Count++
		a = *last
	} else {
		o.answers = append(o.answers, a)
	}
	o.latest.Store(&a)
}

// write makes, while the node's latest answer promises the lease, an
// unfenced put and a fenced one (a transaction that puts only while the
// lease key's create revision is the token promised).
func (w *Workload) write(ctx context.Context, o *observed) {
	tick := time.Tick(w.cfg.WriteEvery)
	for seq := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		a := o.latest.Load()
		if a == nil || !promises(*a) || time.Until(a.Status.Until) < w.cfg.WriteEvery {
			continue
		}
		for _, fenced := range []bool{false, true} {
			seq++
			wr := Write{Node: o.Name, Token: a.Status.Token, Until: a.Status.Until, Fenced: fenced,
				Key: fmt.Sprintf("%s%s/%06d", w.cfg.WritePrefix, o.Name, seq)}
			val := fmt.Sprint(wr.Token)
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			wr.Sent = time.Now()
			if fenced {
				var resp *clientv3.TxnResponse
				resp, wr.Err = o.Client.Txn(wctx).
					If(clientv3.Compare(clientv3.CreateRevision(w.cfg.Key), "=", int64(wr.Token))).
					Then(clientv3.OpPut(wr.Key, val)).Commit()
				if wr.Err == nil {
					wr.Acked, wr.Rev, wr.Succeeded = time.Now(), resp.Header.Revision, resp.Succeeded
				}
			} else {
				var resp *clientv3.PutResponse
				resp, wr.Err = o.Client.Put(wctx, wr.Key, val)
				if wr.Err == nil {
					wr.Acked, wr.Rev, wr.Succeeded = time.Now(), resp.Header.Revision, true
				}
			}
			cancel()
			if ctx.Err() != nil && wr.Err != nil {
				wr.Err = errors.Join(wr.Err, errors.New("cut by Stop"))
			}
			o.mu.Lock()
			o.writes = append(o.writes, wr)
			o.mu.Unlock()
		}
	}
}

// Holder returns the node whose latest answer promises the lease now.
func (w *Workload) Holder() (name string, st lease.Status, ok bool) {
	now := time.Now()
	for _, o := range w.nodes {
		if a := o.latest.Load(); a != nil && promises(*a) && now.Before(a.Status.Until) {
			return o.Name, a.Status, true
		}
	}
	return "", lease.Status{}, false
}

// Stop ends the checks and writes and returns what they saw.
func (w *Workload) Stop() History {
	w.cancel()
	w.wg.Wait()
	h := History{Start: w.start}
	for _, o := range w.nodes {
		o.mu.Lock()
		h.Answers = append(h.Answers, o.answers...)
		h.Writes = append(h.Writes, o.writes...)
		o.mu.Unlock()
	}
	return h
}

// AwaitFresh waits until some node has been promised the lease anew since
// t — in an answer returned after t, reaching past every promise answered
// before t — and reports whether that came within d (or before ctx ended).
func (w *Workload) AwaitFresh(ctx context.Context, t time.Time, d time.Duration) bool {
	ctx, cancel := context.WithDeadline(ctx, t.Add(d))
	defer cancel()
	tick := time.Tick(20 * time.Millisecond)
	for {
		if w.freshSince(t) {
			return true
		}
		select {
		case <-ctx.Done():
			return w.freshSince(t)
		case <-tick:
		}
	}
}

func (w *Workload) freshSince(t time.Time) bool {
	var before, after time.Time
	for _, o := range w.nodes {
		o.mu.Lock()
		for _, a := range o.answers {
			switch {
			case !promises(a):
			case a.First.Before(t):
				before = later(before, a.Status.Until)
			default:
				after = later(after, a.Status.Until)
			}
		}
		o.mu.Unlock()
	}
	return after.After(before)
}
