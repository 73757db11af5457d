// Package etcdtest starts real etcd servers inside a test binary, on
// loopback, for the tests of code that uses etcd — a lease.Tracker on an
// etcdlease store among them: one member (Start), or a cluster of several
// (StartCluster) whose leader a test can find and stop. Members log
// nothing, keep their data in a directory of their own that goes with
// them, and can be stopped as a crashed process would be and restarted on
// the same data and ports.
//
//	func TestFailover(t *testing.T) {
//		c := etcdtest.StartCluster(t, 3) // stopped at t.Cleanup
//		store, err := etcdlease.NewStore(c.Client(), "/test/")
//		...
//		leader, err := c.Leader()
//		...
//		leader.Stop() // as if its process crashed
//	}
//
// Each member also has a client Link (a proxy a test cuts, refuses, slows
// or pauses) to rerun a partition or an outage against the test's own
// trackers; record their answers in a leasetest/history Recorder and let
// Verify judge them (see ExampleLink).
//
// Timing: a single member ticks every 50 ms with a 500 ms election
// timeout (minimum lease TTL 750 ms); a cluster's members every 100 ms
// with a 1 s election timeout (minimum TTL 1.5 s). Members write without
// fsync: their data is thrown away.
package etcdtest
