package apiservertest

import (
	"testing"

	_ "github.com/coldstart-go/coldstart/lease/k8slease"
	_ "github.com/coldstart-go/coldstart/lease/leasetest"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

func TestStub(t *testing.T) {}
