package logtest_test

import (
	"testing"

	"github.com/coldstart-go/coldstart/internal/logtest"
)

// fakeT records Errorf instead of failing, so the test can check that a
// late record is reported.
type fakeT struct {
	testing.TB
	cleanups []func()
	errs     int
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(string, ...any) { f.errs++ }
func (f *fakeT) runCleanups() {
	for _, fn := range f.cleanups {
		fn()
	}
}

func TestSealReportsOnlyLateRecords(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lateLogs int
		wantErrs int
	}{{"none late", 0, 0}, {"one late", 1, 1}, {"two late", 2, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			h := logtest.New()
			l := h.Logger()
			l.Info("before close")
			ft := &fakeT{TB: t}
			h.Seal(ft)
			for i := 0; i < tc.lateLogs; i++ {
				l.With("gate", "x").Info("after close")
			}
			ft.runCleanups()
			if ft.errs != tc.wantErrs {
				t.Fatalf("errors = %d, want %d", ft.errs, tc.wantErrs)
			}
			if got := len(h.Late()); got != tc.lateLogs {
				t.Fatalf("Late() = %d records, want %d", got, tc.lateLogs)
			}
		})
	}
}
