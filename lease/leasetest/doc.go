// Package leasetest helps test code built on package lease: a contract test
// that any lease.Store implementation can run (RunStoreContract), and a
// fault-injecting Store wrapper (FaultStore) that makes a store time out,
// lose a lease, apply a call but report it as timed out, or answer late, so
// users can check that their own code tells "unknown" from "not leader".
//
//	func TestMyStore(t *testing.T) {
//		leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
//			clk := testclock.NewClock(time.Now())
//			return leasetest.Harness{Store: newMyStore(clk), Advance: clk.Advance, Term: time.Minute}
//		})
//	}
package leasetest
