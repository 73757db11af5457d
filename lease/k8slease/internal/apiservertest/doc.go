// Package apiservertest holds the tests of lease/k8slease that need a real
// kube-apiserver: k8s.io/kubernetes's cmd/kube-apiserver/app/testing over an
// embedded etcd, one server per test package, started in TestMain. It is a
// module of its own, and only tests: kubernetes needs 31 replace
// directives for its staging modules, which must not reach the store's
// go.mod, and its build is heavy (~11 min cold on 2 cores, ~3 GB at link).
// It reads certificate fixtures from kubernetes' module directory at run
// time, so it must not be built with -trimpath.
package apiservertest
