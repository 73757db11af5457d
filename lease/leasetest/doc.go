// Package leasetest helps test code built on package lease: a contract test
// that any lease.Store implementation can run (RunStoreContract), a way to
// drive a lease.Tracker on a testclock with no sleeps (Settle waits until it
// waits for the clock, Step moves the clock to its next store call), and a
// fault-injecting Store wrapper (FaultStore) that makes a store time out,
// hang, lose a lease, apply a call but report it as timed out, hold a call
// back unsent, or answer late on a test clock, so users can check that their own code tells
// "unknown" from "not leader". FaultStore is a lease.LossNotifier: it
// forwards the wrapped store's loss signals and injects spurious ones
// (SignalLost), which a tracker must check with the store before believing.
//
//	func TestMyStore(t *testing.T) {
//		leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
//			clk := testclock.NewClock(time.Now())
//			return leasetest.Harness{Store: newMyStore(clk), Advance: clk.Advance, Term: time.Minute}
//		})
//	}
//
//	store := leasetest.NewFaultStore(lease.NewMemStore(lease.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
//	tr, _ := lease.NewTracker(lease.Config{Store: store, Clock: clk, ...})
//	store.Always(leasetest.OpExtend, leasetest.Timeout) // renewals fail
//	r, err := leasetest.Step(ctx, tr, clk) // the next renewal, answered
//	store.Always(leasetest.OpExtend, leasetest.Hang) // renewals never answer
//	// store.WaitBlocked(ctx, 1) tells when a call is in flight, so the
//	// test can advance clk past its timeout; then Settle.
package leasetest
