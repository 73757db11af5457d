// Command kubeapiserver is the kube-apiserver the tests of apiservertest
// talk to: k8s.io/kubernetes's cmd/kube-apiserver/app/testing over an
// embedded etcd, in a process of its own. The tests start it with `go run`
// (see ../server_test.go), so that the server, the heaviest build in the
// repository, is built once, without the race detector, and cached as a
// binary, while the code under test is built with -race.
//
// Once the server serves, it writes one line to stdout: the JSON of a
// Config, what a client needs to reach it. It stops, and removes its data,
// when its stdin ends (the test closed it, or the test process died) or on
// SIGINT or SIGTERM. Its logs go to stderr when K8SLEASE_APISERVER_LOG is
// set, and are discarded otherwise.
//
// It is a module of its own: kubernetes needs 31 replace directives for
// its staging modules, which must not reach any other go.mod, and its build
// is heavy (~900 CPU-seconds from an empty cache, a third less as the
// tests and `make test` build it, unoptimised: NOOPT_GCFLAGS; the link, with go run's
// -s -w, ~13 s). It reads certificate fixtures from kubernetes' module
// directory at run time, so it must not be built with -trimpath.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// Config is what the server prints once it serves: the fields of the
// client-go rest.Config its loopback clients use (the tests hold a copy of
// this type).
type Config struct {
	Host        string  `json:"host"`
	BearerToken string  `json:"bearerToken,omitempty"`
	ServerName  string  `json:"serverName,omitempty"`
	CAData      []byte  `json:"caData,omitempty"`
	CertData    []byte  `json:"certData,omitempty"`
	KeyData     []byte  `json:"keyData,omitempty"`
	QPS         float32 `json:"qps,omitempty"`
	Burst       int     `json:"burst,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapiserver:", err)
		os.Exit(1)
	}
}

func run() error {
	// If the test process dies, the pipes of our stdout and stderr may
	// close before we have stopped: a write to them must fail, not kill us
	// before the cleanup below.
	signal.Ignore(syscall.SIGPIPE)
	tb := &mainTB{verbose: os.Getenv("K8SLEASE_APISERVER_LOG") != ""}
	if !tb.verbose {
		// The servers' own logs go to klog.
		klog.SetLogger(logr.Discard())
	}
	cfg, stop, err := startServers(tb)
	if err != nil {
		return err
	}
	defer stop()
	if err := json.NewEncoder(os.Stdout).Encode(cfg); err != nil {
		return fmt.Errorf("write the client config: %w", err)
	}
	ended := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(ended)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-ended:
	case <-sig:
	}
	return nil
}

// startServers starts an embedded etcd and a kube-apiserver over it, and
// returns the server's client config and a func that stops both.
func startServers(tb *mainTB) (Config, func(), error) {
	dir, err := os.MkdirTemp("", "k8slease-etcd")
	if err != nil {
		return Config{}, nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "apiservertest"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // test data, thrown away
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return Config{}, nil, fmt.Errorf("start etcd: %w", err)
	}
	stopEtcd := func() {
		e.Close()
		os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stopEtcd()
		return Config{}, nil, fmt.Errorf("etcd failed: %w", err)
	case <-time.After(30 * time.Second):
		stopEtcd()
		return Config{}, nil, fmt.Errorf("etcd not ready after 30s")
	}

	storage := storagebackend.NewDefaultConfig("/k8slease-test", nil)
	// The --etcd-servers flag alone is not enough: StartTestServer takes
	// the storage config whole.
	storage.Transport.ServerList = []string{"http://" + e.Clients[0].Addr().String()}
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	opts.DisableInvariantChecks = true // kube's metrics invariants are not what these tests are about
	srv, err := startTestServer(tb, opts, storage)
	if err != nil {
		tb.cleanup()
		stopEtcd()
		return Config{}, nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	c := srv.ClientConfig
	return Config{
			Host:        c.Host,
			BearerToken: c.BearerToken,
			ServerName:  c.TLSClientConfig.ServerName,
			CAData:      c.TLSClientConfig.CAData,
			CertData:    c.TLSClientConfig.CertData,
			KeyData:     c.TLSClientConfig.KeyData,
			QPS:         c.QPS,
			Burst:       c.Burst,
		}, func() {
			srv.TearDownFn()
			tb.cleanup()
			stopEtcd()
		}, nil
}

// startTestServer is StartTestServer, with the panic of a FailNow (see
// mainTB) turned back into an error.
func startTestServer(tb *mainTB, opts *kubeapiservertesting.TestServerInstanceOptions, storage *storagebackend.Config) (srv kubeapiservertesting.TestServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(failNow); !ok {
				panic(r)
			}
			err = fmt.Errorf("%s", tb.lastError())
		}
	}()
	return kubeapiservertesting.StartTestServer(tb, opts, serverFlags, storage)
}

// serverFlags are the server's flags beyond the test server's own:
// coordinated leader election (KEP-4355; beta, off by default), so that
// the API server keeps a Lease's spec.strategy and spec.preferredHolder
// (it drops them with the gate off) and serves LeaseCandidates.
var serverFlags = []string{
	"--feature-gates=CoordinatedLeaderElection=true",
	"--runtime-config=coordination.k8s.io/v1beta1=true",
}

// failNow is the panic of mainTB.FailNow.
type failNow struct{}

// mainTB is the testing.TB-like value StartTestServer needs, in a program
// that has none. It keeps the server's logs unless verbose, and turns a
// fatal error into a panic that startTestServer recovers.
type mainTB struct {
	mu       sync.Mutex
	failed   bool
	lastErr  string
	cleanups []func()
	verbose  bool
}

func (tb *mainTB) cleanup() {
	tb.mu.Lock()
	fns := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func (tb *mainTB) lastError() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.lastErr == "" {
		return "failed (set K8SLEASE_APISERVER_LOG=1 for its logs)"
	}
	return tb.lastErr
}

func (tb *mainTB) note(msg string) {
	tb.mu.Lock()
	tb.lastErr = msg
	tb.mu.Unlock()
	if tb.verbose {
		fmt.Fprintln(os.Stderr, msg)
	}
}

func (tb *mainTB) Attr(key, value string) {}
func (tb *mainTB) Chdir(dir string)       { panic("kubeapiserver: Chdir") }
func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}
func (tb *mainTB) Error(args ...any) { tb.note(fmt.Sprint(args...)); tb.Fail() }
func (tb *mainTB) Errorf(format string, args ...any) {
	tb.note(fmt.Sprintf(format, args...))
	tb.Fail()
}
func (tb *mainTB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}
func (tb *mainTB) FailNow() { tb.Fail(); panic(failNow{}) }
func (tb *mainTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}
func (tb *mainTB) Fatal(args ...any) { tb.note(fmt.Sprint(args...)); tb.FailNow() }
func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.note(fmt.Sprintf(format, args...))
	tb.FailNow()
}
func (tb *mainTB) Helper() {}
func (tb *mainTB) Log(args ...any) {
	if tb.verbose {
		fmt.Fprintln(os.Stderr, args...)
	}
}
func (tb *mainTB) Logf(format string, args ...any) {
	if tb.verbose {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}
func (tb *mainTB) Name() string                  { return "kubeapiserver" }
func (tb *mainTB) Setenv(key, value string)      { panic("kubeapiserver: Setenv") }
func (tb *mainTB) Skip(args ...any)              { panic("kubeapiserver: Skip") }
func (tb *mainTB) Skipf(format string, a ...any) { panic("kubeapiserver: Skip") }
func (tb *mainTB) SkipNow()                      { panic("kubeapiserver: Skip") }
func (tb *mainTB) Skipped() bool                 { return false }
func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "k8slease-apiserver")
	if err != nil {
		panic(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
