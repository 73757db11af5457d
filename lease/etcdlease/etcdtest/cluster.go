package etcdtest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cluster is a cluster of etcd members running in this process. It is safe
// for concurrent use.
type Cluster struct {
	members []*Member
	dir     string
	// httpBefore counts the net/http goroutines that ran before the
	// cluster started (see Close).
	httpBefore int

	mu     sync.Mutex
	client *clientv3.Client
	closed bool
}

// StartCluster is NewCluster for the test t (n ≥ 1; 3 tolerates one member
// down): the cluster is closed at t.Cleanup (see Close), and the test fails
// if it cannot start.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := NewCluster(n)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// NewCluster starts a cluster of n members, with their data in a new
// temporary directory, and returns it once every member has joined it and
// it has a leader. Close it when done (StartCluster does that for a test).
func NewCluster(n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdtest: a cluster of %d members (must be at least 1)", n)
	}
	dir, err := os.MkdirTemp("", "etcdtest-cluster")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: data directory: %w", err)
	}
	c := &Cluster{dir: dir, httpBefore: len(goroutinesIn("net/http."))}
	var lastErr error
	for attempt := range startAttempts {
		if lastErr = c.start(n, attempt); lastErr == nil {
			return c, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("etcdtest: starting a %d-member cluster: %w", n, lastErr)
}

// start starts n members on freshly reserved peer ports, all at once (a
// member waits for a quorum before it serves), or stops those it started.
func (c *Cluster) start(n, attempt int) error {
	ports, err := reservePorts(n)
	if err != nil {
		return err
	}
	ms := make([]*Member, n)
	for i := range ms {
		dir := fmt.Sprintf("%s%cattempt%d-m%d", c.dir, os.PathSeparator, attempt, i)
		ms[i] = newMember(fmt.Sprintf("m%d", i), dir, ports[i], clusterTickMs, clusterElectionMs)
	}
	initial := initialCluster(ms)
	stopAll := func() {
		for _, m := range ms {
			m.stopLocked() // nobody else sees them yet
		}
	}
	launched := make([]chan error, n)
	deadline := time.Now().Add(readyWithin)
	for i, m := range ms {
		m.initial = initial
		e, err := m.launch()
		if err != nil {
			stopAll()
			return err
		}
		launched[i] = make(chan error, 1)
		go func() { launched[i] <- awaitReady(m.name, e, deadline) }()
	}
	var errs []error
	for _, ch := range launched {
		errs = append(errs, <-ch)
	}
	if err := errors.Join(errs...); err != nil {
		stopAll()
		return err
	}
	c.members = ms
	return nil
}

// Members returns the cluster's members, in the order of their names (m0,
// m1, ...).
func (c *Cluster) Members() []*Member { return c.members }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.Endpoints()...)
	}
	return eps
}

// Client returns a client of every member (made at the first call), which
// fails over between them, and is closed by Close.
func (c *Cluster) Client() *clientv3.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lazyClient(&c.client, c.closed, c.Endpoints()...)
}

// Leader returns the member that leads the cluster, as the running members
// themselves report it, waiting up to 10 s for one (after a leader stopped,
// the others elect a new one within a few election timeouts).
func (c *Cluster) Leader() (*Member, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, m := range c.members {
			if e := m.Etcd(); e != nil && e.Server.Leader() == e.Server.MemberID() {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("etcdtest: the cluster has no leader after 10s")
		}
		<-time.After(clusterTickMs * time.Millisecond)
	}
}

// Close closes the clients, stops every member and removes their data.
// Then it waits, at most 15 s, until no more net/http goroutines run than
// before the cluster started, so that goleak sees none (etcd leaves its
// peer connections to end by themselves: DESIGN.md); it returns an error
// naming those still running past that. Close is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cli := c.client
	c.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
	for _, m := range c.members {
		m.Close()
	}
	os.RemoveAll(c.dir)
	return awaitGoroutines("net/http.", c.httpBefore, 3*rafthttpConnReadTimeout)
}

// rafthttpConnReadTimeout is rafthttp.ConnReadTimeout.
const rafthttpConnReadTimeout = 5 * time.Second

// awaitGoroutines waits until at most n goroutines have a frame whose
// function starts with prefix, for up to within.
func awaitGoroutines(prefix string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		left := goroutinesIn(prefix)
		if len(left) <= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdtest: %d goroutines in %s still running %v after the cluster stopped (%d before it started):\n%s",
				len(left), prefix, within, n, strings.Join(left, "\n\n"))
		}
		<-time.After(50 * time.Millisecond)
	}
}

// goroutinesIn returns the stacks of the goroutines with a frame whose
// function name starts with prefix.
func goroutinesIn(prefix string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, prefix) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}
