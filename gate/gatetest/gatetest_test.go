package gatetest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/gatetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recordingT captures failures so the helpers' own failures can be tested.
type recordingT struct {
	testing.TB
	errs []string
}

func (r *recordingT) Helper() {}
func (r *recordingT) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingT) failed() string { return strings.Join(r.errs, "\n") }

func TestAssertLocked(t *testing.T) {
	l := gate.New("api-port")
	rt := &recordingT{TB: t}
	assert.True(t, gatetest.AssertLocked(rt, l))
	l.Unlock()
	assert.False(t, gatetest.AssertLocked(rt, l))
	assert.Contains(t, rt.failed(), `gate "api-port" is unlocked`)

	f := gate.New("f")
	f.Fail(errors.New("boom"))
	rt = &recordingT{TB: t}
	assert.False(t, gatetest.AssertLocked(rt, f))
	assert.Contains(t, rt.failed(), "boom")
}

func TestAssertUnlocksWithin(t *testing.T) {
	l := gate.New("steps")
	go l.Unlock()
	assert.True(t, gatetest.AssertUnlocksWithin(t, l, 10*time.Second))

	rt := &recordingT{TB: t}
	assert.False(t, gatetest.AssertUnlocksWithin(rt, gate.New("never"), time.Millisecond))
	assert.Contains(t, rt.failed(), `gate "never" is still locked after 1ms`)

	failed := gate.New("failed")
	failed.Fail(errors.New("schema"))
	rt = &recordingT{TB: t}
	assert.False(t, gatetest.AssertUnlocksWithin(rt, failed, 10*time.Second))
	assert.Contains(t, rt.failed(), "schema")
}

func TestAssertFailsWithin(t *testing.T) {
	cause := errors.New("schema")
	l := gate.New("steps")
	go l.Fail(cause)
	assert.True(t, gatetest.AssertFailsWithin(t, l, cause, 10*time.Second))

	rt := &recordingT{TB: t}
	open := gate.New("open")
	open.Unlock()
	assert.False(t, gatetest.AssertFailsWithin(rt, open, nil, time.Second))
	assert.Contains(t, rt.failed(), "unlocked; want it failed")

	rt = &recordingT{TB: t}
	assert.False(t, gatetest.AssertFailsWithin(rt, l, errors.New("other"), time.Second))
	assert.Contains(t, rt.failed(), "want an error matching other")

	rt = &recordingT{TB: t}
	assert.False(t, gatetest.AssertFailsWithin(rt, gate.New("pending"), nil, time.Millisecond))
	assert.Contains(t, rt.failed(), "neither unlocked nor failed")
}

func TestRecorderOrder(t *testing.T) {
	ctrl, api, steps := gate.New("controller-port"), gate.New("api-port"), gate.New("upgrade-steps")
	rec := gatetest.NewRecorder(ctrl, api)
	rec.Watch(steps)
	ctrl.Unlock()
	steps.Unlock()
	assert.True(t, rec.AssertNotOpened(t, "api-port"))
	api.Unlock()
	assert.Equal(t, []string{"controller-port", "upgrade-steps", "api-port"}, rec.Order())
	assert.True(t, rec.AssertOrder(t, "controller-port", "api-port"))
	assert.True(t, rec.AssertOrder(t, "upgrade-steps", "api-port"))

	rt := &recordingT{TB: t}
	assert.False(t, rec.AssertOrder(rt, "api-port", "controller-port"))
	assert.Contains(t, rt.failed(), "want [api-port controller-port]")

	rt = &recordingT{TB: t}
	assert.False(t, rec.AssertNotOpened(rt, "api-port"))

	rt = &recordingT{TB: t}
	assert.False(t, rec.AssertOrder(rt, "controller-port", "lease"))
	assert.Contains(t, rt.failed(), `gate "lease" has not unlocked`)
}

func TestRecorderIgnoresFailedGates(t *testing.T) {
	a, b := gate.New("a"), gate.New("b")
	rec := gatetest.NewRecorder(a, b)
	a.Fail(errors.New("x"))
	b.Unlock()
	assert.Equal(t, []string{"b"}, rec.Order())
}

func ExampleRecorder() {
	ctrlPort, apiPort := gate.New("controller-port"), gate.New("api-port")
	rec := gatetest.NewRecorder(ctrlPort, apiPort)

	// ... the code under test opens the ports ...
	ctrlPort.Unlock()
	apiPort.Unlock()

	fmt.Println(rec.Order())
	// In a test: rec.AssertOrder(t, "controller-port", "api-port")
	// Output: [controller-port api-port]
}
