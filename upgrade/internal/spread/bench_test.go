package spread_test

import (
	"testing"

	"github.com/coldstart-go/coldstart/upgrade/internal/spread"
)

var sink int64

// BenchmarkDraw is what spreading adds to every refusal.
func BenchmarkDraw(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = spread.Draw(1000, 2000)
	}
}
