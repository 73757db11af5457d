package apiservertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/coldstart-go/coldstart/lease/k8slease"
)

// apiServer is the package's one kube-apiserver (started in TestMain): its
// client config, for a test to copy.
var apiServer *rest.Config

// serverConfig is what the kubeapiserver program prints once it serves (a
// copy of its Config).
type serverConfig struct {
	Host        string  `json:"host"`
	BearerToken string  `json:"bearerToken,omitempty"`
	ServerName  string  `json:"serverName,omitempty"`
	CAData      []byte  `json:"caData,omitempty"`
	CertData    []byte  `json:"certData,omitempty"`
	KeyData     []byte  `json:"keyData,omitempty"`
	QPS         float32 `json:"qps,omitempty"`
	Burst       int     `json:"burst,omitempty"`
}

// serverGCFlags are the server's compiler flags, the Makefile's
// NOOPT_GCFLAGS, so that the build `make test` makes first is the one
// found here: no optimisation, inlining or DWARF, a third less CPU for the
// heaviest build in the tree, for a server these tests only talk to.
const serverGCFlags = "all=-N -l -dwarf=false"

// startServers starts the kube-apiserver (and its etcd) in a process of its
// own, `go run ./kubeapiserver`: a module of its own, built without the race
// detector and cached by the go command as a binary, so that only the code
// under test is built with -race. It returns the server's client config
// and a func that stops the server. The first build of the server takes
// 8–15 min on 2 cores (`make test` vets its module first, which builds all
// but its link); later runs start it in seconds.
func startServers() (*rest.Config, func() error, error) {
	cmd := exec.Command("go", "run", "-gcflags="+serverGCFlags, ".")
	cmd.Dir = "kubeapiserver"
	// The server is built against its own go.mod, as `make test` builds it.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stderr = os.Stderr
	// The server stops when its stdin ends: when stop closes it, or when
	// this process dies.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("go run ./kubeapiserver: %w", err)
	}
	exited := make(chan error, 1)
	stop := func() error {
		stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-exited
			return errors.New("kubeapiserver still running 2 minutes after its stdin closed: killed")
		}
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	go func() { exited <- cmd.Wait() }()
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("go run ./kubeapiserver: no client config (%v); its output is above", err)
	}
	var sc serverConfig
	if err := json.Unmarshal(line, &sc); err != nil {
		stop()
		return nil, nil, fmt.Errorf("kubeapiserver's client config %q: %w", line, err)
	}
	return &rest.Config{
		Host:        sc.Host,
		BearerToken: sc.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: sc.ServerName,
			CAData:     sc.CAData,
			CertData:   sc.CertData,
			KeyData:    sc.KeyData,
		},
		QPS:   sc.QPS,
		Burst: sc.Burst,
	}, stop, nil
}

// newClient returns a clientset of the test server reached through host
// ("" for the server itself; a proxy's address otherwise), on a transport of
// its own whose connections close at cleanup.
func newClient(t testing.TB, host string) kubernetes.Interface {
	t.Helper()
	return newClientWith(t, host, nil)
}

// newClientWith is newClient whose requests go through wrap's round
// tripper, if wrap is not nil (see rest.Config.WrapTransport).
func newClientWith(t testing.TB, host string, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(apiServer)
	cfg.WrapTransport = wrap
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
	name := fmt.Sprintf("t%d-%s", namespaces.Add(1), strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name())))
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
