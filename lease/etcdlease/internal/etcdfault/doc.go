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
//	c, err := etcdfault.Start(ctx, etcdfault.Config{Dir: t.TempDir(), Logf: t.Logf})
//	...
//	t.Cleanup(c.Close)
//	w := etcdfault.Observe(nodes, etcdfault.WorkloadConfig{Key: "/leases/singular"})
//	leader, _ := c.Leader(ctx)
//	c.Isolate(leader)
//	...
//	c.HealAll()
//	h := w.Stop()
//	terms, _ := etcdfault.ReadTerms(ctx, cli, "/leases/singular")
//	v := etcdfault.Check(h, terms, nil, etcdfault.Heals(c.Events()), 3*duration)
//
// It is Linux-only: a peer proxy tells which member dialled a connection
// from /proc (see procnet.go).
package etcdfault
