package etcdlease_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
)

func TestMain(m *testing.M) {
	etcdfault.MemberMain() // in a fault test's member process: runs etcd and exits
	goleak.VerifyTestMain(m)
}
