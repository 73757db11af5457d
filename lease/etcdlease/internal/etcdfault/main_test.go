package etcdfault_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/lease/etcdlease/internal/etcdfault"
)

func TestMain(m *testing.M) {
	etcdfault.MemberMain() // a member process runs etcd here and exits
	goleak.VerifyTestMain(m)
}
