package leasestore_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 11, 30, 6, 26, 0, 0, time.UTC) // the test clock's start

const (
	dur  = 30 * time.Second // the term the tests ask for
	wait = 5 * time.Second  // a real-time bound on a test's own waits
)
