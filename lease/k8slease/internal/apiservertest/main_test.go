package apiservertest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain starts one etcd and one kube-apiserver for the whole package
// (~2.5 s, ~300 MB), runs the tests, checks that they left no goroutine
// behind, and stops the servers.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tb := newMainTB()
	cfg, stop, err := startServers(tb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiservertest:", err)
		return 1
	}
	defer stop()
	apiServer = cfg
	// The servers' goroutines are theirs; what the tests start must end.
	servers := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(servers); err != nil {
			fmt.Fprintln(os.Stderr, "apiservertest: goroutines left behind by the tests:", err)
			code = 1
		}
	}
	return code
}
