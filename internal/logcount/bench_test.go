package logcount_test

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/coldstart-go/coldstart/internal/logcount"
)

// BenchmarkCount compares an event on a counter with a logger, and without
// one, against a bare atomic add, all from parallel goroutines (the
// accept loops and dials that count). With a logger an event also loads
// the "flush scheduled" flag; a flush runs at most once per interval (the
// wall clock's 10 s, longer than a run), so its cost is not in the figure.
func BenchmarkCount(b *testing.B) {
	b.Run("atomic", func(b *testing.B) {
		var n atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
	b.Run("no-logger", func(b *testing.B) {
		agg := logcount.New(logcount.Config{})
		c := agg.Group(slog.LevelInfo, "events").Counter("n")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
		agg.Close()
	})
	b.Run("logger", func(b *testing.B) {
		agg := logcount.New(logcount.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		c := agg.Group(slog.LevelInfo, "events").Counter("n")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
		agg.Close()
	})
}
