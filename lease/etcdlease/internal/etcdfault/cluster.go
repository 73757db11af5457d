//go:build linux

package etcdfault

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/faultnet"
)

// Config describes a Cluster.
type Config struct {
	// Dir holds each member's data directory and log (m0, m0.log, ...);
	// required (a test's t.TempDir()).
	Dir string
	// Members is the number of members; zero means 3.
	Members int
	// TickMs and ElectionMs are etcd's heartbeat interval and election
	// timeout; zero means 100 and 1000 (DESIGN.md, "Timing"). etcd's least
	// lease TTL is 1.5 × ElectionMs.
	TickMs, ElectionMs uint
	// SnapshotCount is how many applied entries make a member snapshot
	// and compact its raft log; SnapshotCatchUpEntries, how many entries
	// it keeps after the snapshot for slow followers (one further behind
	// catches up by installing the snapshot). Zero means etcd's defaults
	// (10,000 and 5,000); small values make a lagging member install a
	// snapshot after a few hundred writes.
	SnapshotCount, SnapshotCatchUpEntries uint64
	// StartTimeout bounds the start of a member and the first election;
	// zero means 30s.
	StartTimeout time.Duration
	// Logf, if set, is told of every fault (t.Logf).
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	c.Members = cmp.Or(c.Members, 3)
	c.TickMs = cmp.Or(c.TickMs, 100)
	c.ElectionMs = cmp.Or(c.ElectionMs, 1000)
	c.StartTimeout = cmp.Or(c.StartTimeout, 30*time.Second)
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Cluster is an etcd cluster of member processes whose peer traffic goes
// through proxies it controls: it cuts and heals links between members
// (one way or both), pauses and resumes members (SIGSTOP, SIGCONT), kills
// them (SIGKILL) and restarts them on their data. Clients reach member i
// at ClientURL(i), which stays the same across restarts.
//
// Every fault is logged with its time, and Events returns them. Close kills
// every member; call it at test cleanup. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg Config
	// links[from][to] is the link from member from to member to.
	links   [][]faultnet.Path
	peers   []*faultnet.Proxy
	clients []*faultnet.Proxy
	// clientsIn[i] is the link from every client to member i: cut, what
	// clients send it waits.
	clientsIn []*faultnet.Path
	admins    []*clientv3.Client // one per member, for Status and MoveLeader
	specs     []memberSpec
	pids      atomic.Pointer[[]int] // by member; 0 while down
	ids       []uint64              // the members' etcd IDs, set by Start

	mu       sync.Mutex
	procs    []*process // nil while down
	paused   []bool
	events   []Event
	degraded bool // a fault is in force: the next full heal is an Event
	closed   bool
}

// Event is a fault or a heal, as the cluster applied it.
type Event struct {
	At   time.Time
	What string
	// Healed: with this event every member runs, none is paused and no
	// link is cut, after a fault.
	Healed bool
}

// Start starts the members and returns once they have elected a leader.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if cfg.Dir == "" {
		return nil, errors.New("etcdfault: empty Config.Dir")
	}
	n := cfg.Members
	c := &Cluster{
		cfg: cfg, links: make([][]faultnet.Path, n),
		procs: make([]*process, n), paused: make([]bool, n), ids: make([]uint64, n),
	}
	pids := make([]int, n)
	c.pids.Store(&pids)
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	var initial []string
	for i := range n {
		c.links[i] = make([]faultnet.Path, n)
	}
	for i := range n {
		pp, err := newPeerProxy(i, c.link, c.dialler)
		if err != nil {
			return nil, err
		}
		c.peers = append(c.peers, pp)
		c.clientsIn = append(c.clientsIn, &faultnet.Path{})
		cp, err := newClientProxy(c.clientsIn[i])
		if err != nil {
			return nil, err
		}
		c.clients = append(c.clients, cp)
		initial = append(initial, memberName(i)+"="+proxyURL(pp))
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{proxyURL(cp)}, DialTimeout: time.Second, Logger: zap.NewNop(),
		})
		if err != nil {
			return nil, err
		}
		c.admins = append(c.admins, cli)
	}
	for i := range n {
		c.specs = append(c.specs, memberSpec{
			Name: memberName(i), Dir: filepath.Join(cfg.Dir, memberName(i)),
			PeerURL: proxyURL(c.peers[i]), ClientURL: proxyURL(c.clients[i]),
			InitialCluster: strings.Join(initial, ","), Token: "etcdfault",
			TickMs: cfg.TickMs, ElectionMs: cfg.ElectionMs,
			SnapshotCount: cfg.SnapshotCount, SnapshotCatchUpEntries: cfg.SnapshotCatchUpEntries,
		})
		if err := c.start(i); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	for i := range n {
		id, err := c.memberID(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("etcdfault: member %s never answered: %w", memberName(i), err)
		}
		c.ids[i] = id
	}
	if _, err := c.Leader(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

func memberName(i int) string { return fmt.Sprintf("m%d", i) }

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.specs) }

// ClientURL is where clients reach member i, across its restarts.
func (c *Cluster) ClientURL(i int) string { return proxyURL(c.clients[i]) }

// start runs member i's process and points its proxies at it.
func (c *Cluster) start(i int) error {
	setPID := func(pid int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.setPIDLocked(i, pid)
	}
	p, err := startProcess(c.specs[i], filepath.Join(c.cfg.Dir, memberName(i)+".log"), c.cfg.StartTimeout, setPID)
	if err != nil {
		setPID(0)
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		p.kill()
		return errors.New("etcdfault: cluster closed")
	}
	c.procs[i], c.paused[i] = p, false
	c.mu.Unlock()
	c.peers[i].SetTarget(p.peer)
	c.clients[i].SetTarget(p.addr)
	return nil
}

func (c *Cluster) setPIDLocked(i, pid int) {
	pids := append([]int(nil), *c.pids.Load()...)
	pids[i] = pid
	c.pids.Store(&pids)
}

func (c *Cluster) link(from, to int) *faultnet.Path { return &c.links[from][to] }

// dialler is the peer proxies' way to tell which member dialled.
func (c *Cluster) dialler(conn net.Conn) int { return dialledBy(conn, *c.pids.Load()) }

// memberID asks member i for its ID.
func (c *Cluster) memberID(ctx context.Context, i int) (uint64, error) {
	for {
		st, err := c.status(ctx, i)
		if err == nil {
			return st.Header.MemberId, nil
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// status asks member i for its status, bounded by a second, on its own
// connection (not a new one per call, as clientv3's Status would dial).
func (c *Cluster) status(ctx context.Context, i int) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return pb.NewMaintenanceClient(c.admins[i].ActiveConnection()).Status(ctx, &pb.StatusRequest{})
}

// Leader returns the member that a majority of the members name as their
// raft leader, asking every member that runs and is not paused; it waits
// until a majority agrees, or ctx ends. A stale leader — one cut off from
// its peers that still believes it leads — is not the answer once the
// majority has elected another.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	tick := time.Tick(time.Duration(c.cfg.TickMs) * time.Millisecond)
	for {
		if i, ok := c.leaderOnce(ctx); ok {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("etcdfault: no leader named by a majority: %w", ctx.Err())
		case <-tick:
		}
	}
}

func (c *Cluster) leaderOnce(ctx context.Context) (int, bool) {
	n := c.Size()
	named := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		c.mu.Lock()
		up := c.procs[i] != nil && !c.paused[i]
		c.mu.Unlock()
		if !up {
			continue
		}
		wg.Go(func() {
			if st, err := c.status(ctx, i); err == nil {
				named[i] = st.Leader
			}
		})
	}
	wg.Wait()
	votes := make(map[uint64]int)
	for _, id := range named {
		if votes[id]++; id != 0 && votes[id] > n/2 {
			if i := slices.Index(c.ids, id); i >= 0 {
				return i, true
			}
		}
	}
	return -1, false
}

// NamesItselfLeader says whether member i, asked now (within a second),
// names itself its raft leader. A leader cut off from its peers does so
// until its next election timeout, while the majority may already have
// elected another: a stale leader.
func (c *Cluster) NamesItselfLeader(ctx context.Context, i int) bool {
	st, err := c.status(ctx, i)
	return err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId()
}

// MoveLeader hands raft leadership to member to, and waits until a
// majority names it.
func (c *Cluster) MoveLeader(ctx context.Context, to int) error {
	for {
		from, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if from == to {
			return nil
		}
		c.event(fmt.Sprintf("move raft leadership %s -> %s", memberName(from), memberName(to)), false)
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.admins[from].MoveLeader(mctx, c.ids[to])
		cancel()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("etcdfault: moving leadership to %s: %w", memberName(to), err)
		}
	}
}

// Cut stops the bytes member from sends member to (to keeps sending).
func (c *Cluster) Cut(from, to int) {
	cut(c.link(from, to))
	c.event(fmt.Sprintf("cut %s -> %s", memberName(from), memberName(to)), false)
}

// Heal lets the bytes member from sends member to through again.
func (c *Cluster) Heal(from, to int) {
	heal(c.link(from, to))
	c.event(fmt.Sprintf("heal %s -> %s", memberName(from), memberName(to)), true)
}

// Isolate cuts every link of member i, both ways.
func (c *Cluster) Isolate(i int) {
	for j := range c.Size() {
		if j != i {
			cut(c.link(i, j))
			cut(c.link(j, i))
		}
	}
	c.event(fmt.Sprintf("isolate %s", memberName(i)), false)
}

// HoldClients makes what clients send member i wait (its answers still
// flow) until ReleaseClients: a slow network between the clients and the
// member, or a member that has not yet read its sockets.
func (c *Cluster) HoldClients(i int) {
	cut(c.clientsIn[i])
	c.event(fmt.Sprintf("hold clients -> %s", memberName(i)), false)
}

// ReleaseClients lets what clients send member i through again.
func (c *Cluster) ReleaseClients(i int) {
	heal(c.clientsIn[i])
	c.event(fmt.Sprintf("release clients -> %s", memberName(i)), true)
}

// HealAll heals every link between members and releases every client link.
func (c *Cluster) HealAll() {
	for i := range c.Size() {
		for j := range c.Size() {
			heal(c.link(i, j))
		}
		heal(c.clientsIn[i])
	}
	c.event("heal all links", true)
}

// Pause stops member i's process (SIGSTOP).
func (c *Cluster) Pause(i int) error { return c.setPaused(i, true) }

// Resume continues member i's process (SIGCONT).
func (c *Cluster) Resume(i int) error { return c.setPaused(i, false) }

func (c *Cluster) setPaused(i int, paused bool) error {
	p, err := c.proc(i)
	if err != nil {
		return err
	}
	sig, name := syscall.SIGCONT, "SIGCONT"
	if paused {
		sig, name = syscall.SIGSTOP, "SIGSTOP"
	}
	if err := syscall.Kill(p.pid(), sig); err != nil {
		return err
	}
	c.mu.Lock()
	c.paused[i] = paused
	c.mu.Unlock()
	c.event(fmt.Sprintf("%s %s", name, memberName(i)), !paused)
	return nil
}

// Kill ends member i's process with SIGKILL, as a crash would.
func (c *Cluster) Kill(i int) error {
	p, err := c.proc(i)
	if err != nil {
		return err
	}
	c.peers[i].SetTarget("")
	c.clients[i].SetTarget("")
	p.kill()
	c.mu.Lock()
	c.procs[i], c.paused[i] = nil, false
	c.setPIDLocked(i, 0)
	c.mu.Unlock()
	c.event(fmt.Sprintf("SIGKILL %s", memberName(i)), false)
	return nil
}

// Restart starts member i again on its data, after Kill.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	running := c.procs[i] != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("etcdfault: member %s is running", memberName(i))
	}
	if err := c.start(i); err != nil {
		return err
	}
	c.event(fmt.Sprintf("restart %s", memberName(i)), true)
	return nil
}

func (c *Cluster) proc(i int) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] == nil {
		return nil, fmt.Errorf("etcdfault: member %s is down", memberName(i))
	}
	return c.procs[i], nil
}

// event records what happened; heal marks an action that may have ended
// every fault, which counts as a heal only if it did.
func (c *Cluster) event(what string, heal bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := Event{At: time.Now(), What: what}
	if !c.healthyLocked() {
		c.degraded = true
	} else if heal && c.degraded {
		c.degraded = false
		ev.Healed = true
	}
	c.events = append(c.events, ev)
	c.cfg.Logf("etcdfault: %s%s", what, map[bool]string{true: " (healed)"}[ev.Healed])
}

func (c *Cluster) healthyLocked() bool {
	for i := range c.procs {
		if c.procs[i] == nil || c.paused[i] || isCut(c.clientsIn[i]) {
			return false
		}
		for j := range c.procs {
			if i != j && isCut(c.link(i, j)) {
				return false
			}
		}
	}
	return true
}

// Events returns every fault and heal so far, in order.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// Close kills every member and closes the proxies. It is idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	procs := slices.Clone(c.procs)
	clear(c.procs)
	c.mu.Unlock()
	for _, cli := range c.admins {
		cli.Close()
	}
	for _, p := range procs {
		if p != nil {
			p.kill()
		}
	}
	for _, p := range slices.Concat(c.peers, c.clients) {
		p.Close()
	}
}

// LeasesExpired returns member i's count of etcd leases its own expiry
// loop has revoked (etcd_debugging_server_lease_expired_total, from its
// /metrics): it rises only when a revoke that member proposed, as the
// leader that found the lease expired, was applied — also when the
// proposal was forwarded and committed after the member was deposed.
func (c *Cluster) LeasesExpired(ctx context.Context, i int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.ClientURL(i)+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	// No idle connection outlives the call (goleak).
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("etcdfault: metrics of %s: %w", memberName(i), err)
	}
	defer resp.Body.Close()
	const name = "etcd_debugging_server_lease_expired_total "
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("etcdfault: %s's metrics have no %s", memberName(i), strings.TrimSpace(name))
}

// LeaderSeenBy returns the member that member i, asked now (within a
// second), names its raft leader: -1 when it names none. Unlike Leader it
// asks one member, so it answers while what clients send other members is
// held back (HoldClients).
func (c *Cluster) LeaderSeenBy(ctx context.Context, i int) (int, error) {
	st, err := c.status(ctx, i)
	if err != nil {
		return -1, err
	}
	if st.Leader == 0 {
		return -1, nil
	}
	return slices.Index(c.ids, st.Leader), nil
}
