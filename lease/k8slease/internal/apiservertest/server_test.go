package apiservertest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

	"github.com/coldstart-go/coldstart/lease/k8slease"
)

// apiServer is the package's one kube-apiserver (started in TestMain): its
// client config, for a test to copy.
var apiServer *rest.Config

// startServers starts an embedded etcd and a kube-apiserver over it, and
// returns the server's client config and a func that stops both.
func startServers(tb *mainTB) (*rest.Config, func(), error) {
	if !tb.verbose {
		// The servers' and client-go's own logs (leaderelection's
		// included) go to klog.
		klog.SetLogger(logr.Discard())
	}
	dir, err := os.MkdirTemp("", "k8slease-etcd")
	if err != nil {
		return nil, nil, err
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
		return nil, nil, fmt.Errorf("start etcd: %w", err)
	}
	stopEtcd := func() {
		e.Close()
		os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stopEtcd()
		return nil, nil, fmt.Errorf("etcd failed: %w", err)
	case <-time.After(30 * time.Second):
		stopEtcd()
		return nil, nil, fmt.Errorf("etcd not ready after 30s")
	}

	storage := storagebackend.NewDefaultConfig("/k8slease-test", nil)
	// The --etcd-servers flag alone is not enough: StartTestServer takes
	// the storage config whole.
	storage.Transport.ServerList = []string{"http://" + e.Clients[0].Addr().String()}
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	opts.DisableInvariantChecks = true // kube's metrics invariants are not what these tests are about
	srv, err := kubeapiservertesting.StartTestServer(tb, opts, nil, storage)
	if err != nil {
		stopEtcd()
		return nil, nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	return srv.ClientConfig, func() {
		srv.TearDownFn()
		tb.cleanup()
		stopEtcd()
	}, nil
}

// newClient returns a clientset of the test server reached through host
// ("" for the server itself; a proxy's address otherwise), on a transport of
// its own whose connections close at cleanup.
func newClient(t testing.TB, host string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(apiServer)
	if host != "" {
		cfg.Host = "https://" + host
	}
	// A dialer of its own gives the client a transport of its own (client-go
	// caches transports by config); it keeps every connection, to close at
	// cleanup, calls in flight included, so that nothing is left behind.
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	require.NoError(t, err)
	return cs
}

var namespaces atomic.Int64

// newNamespace creates a namespace for one test and returns its name.
func newNamespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", namespaces.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// newStore returns a Store in namespace ns of clientset cs.
func newStore(t testing.TB, cs kubernetes.Interface, ns string, opts ...k8slease.Option) *k8slease.Store {
	t.Helper()
	s, err := k8slease.NewStore(cs.CoordinationV1(), ns, opts...)
	require.NoError(t, err)
	return s
}

// mainTB is the testing.TB-like value StartTestServer needs, for TestMain,
// which has none: one server serves the whole package. It keeps the
// server's logs unless K8SLEASE_APISERVER_LOG is set, and turns a fatal
// error into a panic (only StartTestServer calls it, before any test runs).
type mainTB struct {
	mu       sync.Mutex
	failed   bool
	cleanups []func()
	verbose  bool
}

func newMainTB() *mainTB { return &mainTB{verbose: os.Getenv("K8SLEASE_APISERVER_LOG") != ""} }

func (tb *mainTB) cleanup() {
	tb.mu.Lock()
	fns := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func (tb *mainTB) Attr(key, value string) {}
func (tb *mainTB) Chdir(dir string)       { panic("apiservertest: Chdir in TestMain") }
func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}
func (tb *mainTB) Error(args ...any) { tb.Log(args...); tb.Fail() }
func (tb *mainTB) Errorf(format string, args ...any) {
	tb.Logf(format, args...)
	tb.Fail()
}
func (tb *mainTB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}
func (tb *mainTB) FailNow() { panic("apiservertest: the test server failed to start") }
func (tb *mainTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}
func (tb *mainTB) Fatal(args ...any) { tb.Log(args...); tb.FailNow() }
func (tb *mainTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
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
func (tb *mainTB) Name() string                  { return "apiservertest" }
func (tb *mainTB) Setenv(key, value string)      { panic("apiservertest: Setenv in TestMain") }
func (tb *mainTB) Skip(args ...any)              { panic("apiservertest: Skip in TestMain") }
func (tb *mainTB) Skipf(format string, a ...any) { panic("apiservertest: Skip in TestMain") }
func (tb *mainTB) SkipNow()                      { panic("apiservertest: Skip in TestMain") }
func (tb *mainTB) Skipped() bool                 { return false }
func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "k8slease-apiserver")
	if err != nil {
		panic(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
