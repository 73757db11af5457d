// Package etcdfault is a Jepsen-style fault harness on real etcd, for the
// tests of package etcdlease: a cluster of member processes whose peer
// links it cuts (per direction), whose processes it pauses, kills and
// restarts, a workload that records every answer of the trackers under
// test, and a checker that judges that history against etcd's own record
// of the lease.
// Why processes, not an in-process etcd: DESIGN.md.
//
// Members are the test binary itself, re-executed with an environment
// variable naming the member to run; call MemberMain first in TestMain:
//
//	func TestMain(m *testing.M) {
//		etcdfault.MemberMain()
//		goleak.VerifyTestMain(m)
//	}
//
// Then Start a Cluster, Observe the nodes, apply faults, Stop the Workload
// and Check its History against ReadTerms (etcdlease's fault_test.go).
//
// It is Linux-only: a peer proxy tells which member dialled a connection
// from /proc (see procnet.go).
package etcdfault
