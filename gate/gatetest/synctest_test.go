package gatetest_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/gatetest"
)

// The helpers inside a testing/synctest bubble: their bounds are the
// bubble's fake time, so a generous bound costs no real time and a gate
// that opens returns the helper at the exact instant it opens;
// synctest.Wait before AssertLocked or AssertNotOpened makes "still
// locked" a fact rather than a race with the goroutine that would open it.
func TestSyncTestHelpersRunInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctrl, api := gate.New("controller-port"), gate.New("api-port")
		rec := gatetest.NewRecorder(ctrl, api)
		go func() {
			time.Sleep(2 * time.Second)
			ctrl.Unlock()
			time.Sleep(time.Second)
			api.Unlock()
		}()

		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		assert.True(t, gatetest.AssertLocked(t, ctrl))
		assert.True(t, rec.AssertNotOpened(t, "controller-port", "api-port"))
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		rt := &recordingT{TB: t}
		assert.False(t, gatetest.AssertLocked(rt, ctrl), "opened at 2s exactly")
		assert.Equal(t, []string{"controller-port"}, rec.Order())

		assert.True(t, gatetest.AssertUnlocksWithin(t, api, time.Hour))
		assert.Equal(t, 3*time.Second, time.Since(start), "returned as api-port opened, not at the bound")
		assert.True(t, rec.AssertOrder(t, "controller-port", "api-port"))

		// A gate nobody opens: the bound passes in fake time, exactly.
		rt = &recordingT{TB: t}
		at := time.Now()
		assert.False(t, gatetest.AssertUnlocksWithin(rt, gate.New("never"), time.Hour))
		assert.Equal(t, time.Hour, time.Since(at))
		assert.Contains(t, rt.failed(), `gate "never" is still locked after 1h0m0s`)
	})
}

func TestSyncTestAssertFailsWithinInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		steps := gate.New("upgrade-steps")
		diskFull := errors.New("disk full")
		go func() {
			time.Sleep(30 * time.Second)
			steps.Fail(diskFull)
		}()
		at := time.Now()
		assert.True(t, gatetest.AssertFailsWithin(t, steps, diskFull, time.Hour))
		assert.Equal(t, 30*time.Second, time.Since(at))

		rt := &recordingT{TB: t}
		at = time.Now()
		assert.False(t, gatetest.AssertFailsWithin(rt, gate.New("pending"), nil, time.Minute))
		assert.Equal(t, time.Minute, time.Since(at))
		assert.Contains(t, rt.failed(), `gate "pending" neither unlocked nor failed within 1m0s`)
	})
}
