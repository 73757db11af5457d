// Package leasetest helps test code built on package lease: a contract test
// that any leasestore.Store implementation can run (RunStoreContract), a way to
// drive a lease.Tracker on a testclock with no sleeps (Settle waits until it
// waits for the clock, Step moves the clock to its next store call), and a
// fault-injecting Store wrapper (FaultStore: see Fault), so users can check
// that their own code tells "unknown" from "not leader".
//
//	func TestMyStore(t *testing.T) {
//		leasetest.RunStoreContract(t, func(t *testing.T) leasetest.Harness {
//			clk := testclock.NewClock(time.Now())
//			return leasetest.Harness{Store: newMyStore(clk), Advance: clk.Advance, Term: time.Minute}
//		})
//	}
//
//	store := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
//	tr, _ := lease.NewTracker(lease.Config{Store: store, Clock: clk, ...})
//	store.Always(leasetest.OpExtend, leasetest.Timeout) // renewals fail
//	r, err := leasetest.Step(ctx, tr, clk) // the next renewal, answered
//	store.Always(leasetest.OpExtend, leasetest.Hang) // renewals never answer
//	// store.WaitBlocked(ctx, 1) tells when a call is in flight, so the
//	// test can advance clk past its timeout; then Settle.
//
// Whether the trackers of a test kept their promises (see history.Rule) is
// the job of package leasetest/history: record every answer, then Verify.
//
// # Fake time without a testclock: testing/synctest
//
// A Tracker, MemStore and FaultStore also run inside a testing/synctest
// bubble (Go 1.25 and later) on their default clocks: leave Config.Clock,
// MemStoreConfig.Clock and FaultStoreConfig.Clock nil, and the bubble's
// fake time drives every claim, renewal, retry, call timeout and FaultStore
// latency. synctest.Wait does what Settle does on a testclock: when it
// returns, every tracker waits for its next timer. Close the trackers
// before the bubble's function returns (synctest.Test waits for every
// goroutine of the bubble). A store that waits on a network (etcdlease,
// k8slease) does not belong in a bubble: fake time stands still while it
// waits.
// The shape (TestSyncTestHourOfRenewalsAndAHandOver is the whole of it):
//
//	synctest.Test(t, func(t *testing.T) {
//		store := leasestore.NewMemStore(leasestore.MemStoreConfig{}) // the bubble's clock
//		a, _ := lease.NewTracker(lease.Config{Store: store, Name: "l", Holder: "a", Duration: 10 * time.Second})
//		// ... goroutines that Check and rec.Record (history) each answer ...
//		time.Sleep(time.Hour) // an hour of renewals
//		// ... stop the goroutines ...
//		a.Close()
//		for _, v := range rec.Verify() {
//			t.Error(v)
//		}
//	})
package leasetest
