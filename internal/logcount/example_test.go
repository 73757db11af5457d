package logcount_test

import (
	"log/slog"
	"os"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/internal/logcount"
)

// 3,000 refused connections make one record, here flushed by Close.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	clk := testclock.NewClock(t0)
	agg := logcount.New(logcount.Config{Logger: logger, Clock: clk})
	g := agg.Group(slog.LevelInfo, "connections rate-limited or refused", slog.String("port", "api"))
	limited, refused := g.Counter("rate_limited"), g.Counter("refused")
	for range 3000 {
		refused.Inc()
	}
	limited.Add(12)
	agg.Close()
	// Output:
	// level=INFO msg="connections rate-limited or refused" port=api rate_limited=12 refused=3000 interval=0s
}
