package apiservertest

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

// TestMain starts one etcd and one kube-apiserver for the whole package, in
// a process of their own (~3 s once built; see startServers), runs the
// tests, checks that they left no goroutine behind, and stops the servers.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("K8SLEASE_APISERVER_LOG") == "" {
		// client-go's own logs (leaderelection's included) go to klog.
		klog.SetLogger(logr.Discard())
	}
	cfg, stop, err := startServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiservertest:", err)
		return 1
	}
	apiServer = cfg
	// What runs now (the wait for the server's process) is TestMain's; what
	// the tests start must end.
	server := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(server); err != nil {
			fmt.Fprintln(os.Stderr, "apiservertest: goroutines left behind by the tests:", err)
			code = 1
		}
	}
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "apiservertest: stop the servers:", err)
		code = 1
	}
	return code
}
