//go:build linux

package etcdfault

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// A member is the test binary itself, re-executed with envMember set to
// its memberSpec: MemberMain, called first in the test's TestMain, sees it
// and runs one embedded etcd instead of the tests. No etcd binary is
// needed, and the member runs the etcd the module requires.
const envMember = "COLDSTART_ETCDFAULT_MEMBER"

// readyPrefix starts the one line a member writes on its stdout, once it
// listens: "etcdfault-ready peer=127.0.0.1:p client=127.0.0.1:q".
const readyPrefix = "etcdfault-ready"

// memberSpec is what a member process is told.
type memberSpec struct {
	Name           string
	Dir            string
	PeerURL        string // advertised: the member's peer proxy
	ClientURL      string // advertised: the member's client proxy
	InitialCluster string // name=peer proxy URL, ...
	Token          string
	TickMs         uint
	ElectionMs     uint
	// SnapshotCount and SnapshotCatchUpEntries: zero means etcd's
	// defaults.
	SnapshotCount, SnapshotCatchUpEntries uint64
}

// MemberMain runs an etcd member and exits if this process was started by
// a Cluster as one; otherwise it returns at once. Call it first in
// TestMain, before goleak or m.Run, in every test binary that starts a
// Cluster.
func MemberMain() {
	v, ok := os.LookupEnv(envMember)
	if !ok {
		return
	}
	if err := serveMember(v); err != nil {
		fmt.Fprintln(os.Stderr, "etcdfault member:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveMember(specJSON string) error {
	var spec memberSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("bad %s: %w", envMember, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = spec.Name
	cfg.Dir = spec.Dir
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"} // the member's log file
	cfg.TickMs = spec.TickMs
	cfg.ElectionMs = spec.ElectionMs
	if spec.SnapshotCount != 0 {
		cfg.SnapshotCount = spec.SnapshotCount
	}
	if spec.SnapshotCatchUpEntries != 0 {
		cfg.SnapshotCatchUpEntries = spec.SnapshotCatchUpEntries
	}
	cfg.UnsafeNoFsync = true // a killed process loses nothing: the page cache survives it
	listen := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	peer, err := url.Parse(spec.PeerURL)
	if err != nil {
		return err
	}
	client, err := url.Parse(spec.ClientURL)
	if err != nil {
		return err
	}
	cfg.ListenPeerUrls = []url.URL{listen}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.ListenClientUrls = []url.URL{listen}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.InitialCluster = spec.InitialCluster
	cfg.InitialClusterToken = spec.Token
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("%s peer=%s client=%s\n", readyPrefix, e.Peers[0].Addr(), e.Clients[0].Addr())
	// Pdeathsig kills a member whose test process dies; this covers the
	// case where the thread that started it is gone first.
	orphaned := make(chan struct{})
	go func() {
		parent := os.Getppid()
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != parent {
				close(orphaned)
				return
			}
		}
	}()
	select {
	case err := <-e.Err():
		return err
	case <-e.Server.StopNotify():
		return errors.New("etcd server stopped")
	case <-orphaned:
		return errors.New("test process gone")
	}
}

// process is one run of a member.
type process struct {
	cmd  *exec.Cmd
	out  *os.File // the read end of its stdout
	peer string   // its own peer listener address
	addr string   // its own client listener address
}

// startProcess starts a member and waits, at most timeout, for it to say
// where it listens. Its stderr (etcd's log) is appended to logPath.
// started is told its pid at once: it dials its peers before it says it
// listens.
func startProcess(spec memberSpec, logPath string, timeout time.Duration, started func(pid int)) (*process, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envMember+"="+string(js))
	cmd.Stdout, cmd.Stderr = w, logf // files: exec starts no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &process{cmd: cmd, out: r}
	started(p.pid())
	if err := p.readReady(timeout); err != nil {
		p.kill()
		return nil, fmt.Errorf("member %s (pid %d): %w (its log: %s)", spec.Name, cmd.Process.Pid, err, logPath)
	}
	return p, nil
}

func (p *process) readReady(timeout time.Duration) error {
	if err := p.out.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	line, err := bufio.NewReader(p.out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no ready line: %w", err)
	}
	if _, err := fmt.Sscanf(line, readyPrefix+" peer=%s client=%s\n", &p.peer, &p.addr); err != nil {
		return fmt.Errorf("bad ready line %q: %w", line, err)
	}
	return nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// kill ends the process with SIGKILL (a paused one too) and reaps it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.out.Close()
}
