package etcdlease_test

// Test tools beside the etcdtest kit (which runs the embedded etcd
// servers, and the links that cut a client off a member): extra clients.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// newClient returns a client of the given endpoints, closed at cleanup
// (before the etcdtest members stop: cleanups run last-in first-out).
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	return newClientWith(t, nil, endpoints...)
}

// newClientWith is newClient with extra gRPC dial options.
func newClientWith(t testing.TB, dial []grpc.DialOption, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		DialOptions: dial,
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Notice a dead member promptly.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// promptRedial makes a client redial within 200 ms once its member is
// back (or its link healed): grpc's default reconnect backoff (1 s growing
// to 120 s) outlasts the short leases of a test.
var promptRedial = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
	MinConnectTimeout: time.Second,
})}
