// Package wrapped logs every way the scanner must see through.
package wrapped

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"example.com/logs/internal/agg"
)

const msgConst = "from a constant"

type thing struct {
	lg  *slog.Logger // declared *slog.Logger: any name
	cfg struct{ Logger *slog.Logger }
}

func (t *thing) direct(ctx context.Context) {
	t.lg.Info("a literal", "k", 1)
	t.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, msgConst)
	t.lg.With("x", 1).ErrorContext(ctx, "after "+"With")
}

// logPort is a wrapper: its callers name the message.
func (t *thing) logPort(level slog.Level, msg string) {
	t.lg.Log(context.Background(), level, msg)
}

func (t *thing) callers() {
	t.logPort(slog.LevelInfo, "through a wrapper")
	t.logPort(slog.LevelError, "through a wrapper, again")
}

func (t *thing) local(bad bool) {
	level, msg := slog.LevelInfo, ""
	if bad {
		level, msg = slog.LevelWarn, "a local variable, one way"
	} else {
		msg = "a local variable, the other"
	}
	t.lg.Log(context.Background(), level, msg)
}

func (t *thing) counted() *agg.Group {
	return agg.New(t.lg).Group(slog.LevelWarn, "through a field of another package")
}

// Not records: a test's Error, http.Error, an error's Error.
func notRecords(tb testing.TB, w http.ResponseWriter, err error) {
	tb.Error(err)
	tb.Error("not a logger")
	http.Error(w, err.Error(), 500)
}

func (t *thing) phase(failed bool) {
	level := slog.LevelInfo
	if failed {
		level = slog.LevelWarn
	}
	t.lg.LogAttrs(context.Background(), level, "two levels")
}
