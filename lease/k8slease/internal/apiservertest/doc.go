// Package apiservertest holds the tests of lease/k8slease that need a real
// kube-apiserver: k8s.io/kubernetes's cmd/kube-apiserver/app/testing over an
// embedded etcd, one server per test package, started in TestMain.
//
// The server runs in a process of its own, the program in ./kubeapiserver,
// which TestMain starts with `go run`: a module of its own (kubernetes needs
// 31 replace directives for its staging modules, which must reach no other
// go.mod), built without the race detector and cached by the go command as
// a binary. So `go test -race` builds only the code under test (the store,
// client-go, these tests) with the race detector, and a warm run starts the
// server in seconds. Its first build is heavy (~900 CPU-seconds: 8–15 min
// on 2 cores): `make test` builds it before these tests run. Set
// K8SLEASE_APISERVER_LOG=1 to see the server's logs.
package apiservertest
