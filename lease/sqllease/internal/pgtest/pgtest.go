// Package pgtest starts a real PostgreSQL server for sqllease's tests: a
// fresh cluster (initdb) in a temporary directory, on a free loopback
// port, as an unprivileged user — the postgres system user Debian's
// package creates when the tests run as root (Postgres refuses root),
// else the user running them. It can kill the server (its whole process
// group, as a crash would) and start it again on its data.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// Missing is the advice when the binaries are not found.
const Missing = "PostgreSQL's server binaries (initdb, postgres) are not on PATH nor under /usr/lib/postgresql/*/bin: " +
	"`make test` (and .ci/run) installs Debian's package; or run `apt-get install -y postgresql`"

// Server is one PostgreSQL server.
type Server struct {
	bin  string // directory of initdb and postgres
	dir  string // data directory, and the socket's
	port int
	cred *syscall.Credential // nil: run as ourselves
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// Start initialises a cluster and starts its server.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root needs the postgres system user (%v): %s", err, Missing)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if s.dir, err = os.MkdirTemp("", "sqllease-pg-"); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(s.dir, "data")
	out, err := s.command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("pgtest: initdb: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.Restart(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(found) == 0 {
		return "", fmt.Errorf("pgtest: %s", Missing)
	}
	slices.SortFunc(found, func(a, b string) int { // the newest version
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	return filepath.Dir(found[0]), nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	// Killed with the test process, however it ends (a panic skips
	// TestMain's Stop); its backends follow their postmaster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Addr is the server's address, host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN is a pgx data source name for database postgres at addr (the
// server's, or a proxy's in front of it), with extra parameters appended.
func DSN(addr, extra string) string {
	dsn := "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2"
	if extra != "" {
		dsn += "&" + extra
	}
	return dsn
}

// Restart starts the server on its data (after Start, or Kill) and waits
// until it answers.
func (s *Server) Restart() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-h", "127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: starting postgres: %w", err)
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(s.cmd, s.exit)
	db, err := sql.Open("pgx", DSN(s.Addr(), ""))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exit:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres exited: %s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postgres not answering after 30s: %v", err)
		}
	}
}

// Kill kills the server and every backend at once (SIGKILL to its
// process group), as a crash of the machine's database would, and waits
// for it to exit.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exit
	// The backends of its group are gone too; give the kernel a moment to
	// reap them so that the restart finds no shared memory in use.
	for i := 0; i < 100 && syscall.Kill(-s.cmd.Process.Pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	os.RemoveAll(s.dir)
}
