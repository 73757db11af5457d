// Package agg keeps a record's message in a field, as internal/logcount
// did.
package agg

import (
	"context"
	"log/slog"
)

type Aggregator struct{ logger *slog.Logger }

type Group struct {
	a   *Aggregator
	msg string
}

func New(l *slog.Logger) *Aggregator { return &Aggregator{logger: l} }

func (a *Aggregator) Group(level slog.Level, msg string) *Group {
	return &Group{a: a, msg: msg}
}

func (g *Group) flush() {
	g.a.logger.LogAttrs(context.Background(), slog.LevelInfo, g.msg)
}
