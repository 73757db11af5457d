// Package history checks that a test's lease trackers kept their promises.
//
// A test records every answer its trackers give (Check, Current, each Lead
// run, StepDown) and every fenced write its resources answer, in a
// Recorder, from any number of goroutines, and Verify judges the whole
// history (why: DESIGN.md; how: Example).
//
// All times in one history must be read from one clock: the clock the
// trackers run on (their Status.Until is on it), read by the test around
// each call. One process's time.Now, a testclock, or the fake clock of a
// testing/synctest bubble all do; times from two machines do not compare.
package history
