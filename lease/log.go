package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/coldstart-go/coldstart/lease/leasestore"
)

// noCall is the latency of a snapshot that is no store call's answer (a
// stopped clock, a step-down, Close): its record has no latency.
const noCall time.Duration = -1

// logChange logs the change from old to s, if a person needs to see it;
// latency is the store call's, or noCall. Only publish calls it.
func (t *Tracker) logChange(old, s *snapshot, latency time.Duration) {
	if t.cfg.Logger == nil {
		return
	}
	o, n := old.status, s.status
	level, msg, token := slog.LevelInfo, "", n.Token
	switch {
	case s.closed:
		if old.closed {
			return
		}
		msg, token = "lease tracker closed", o.Token
	case n.State == Held && o.State == Held && o.Token == n.Token:
		switch {
		case old.cause == nil && s.cause != nil:
			level, msg = slog.LevelWarn, "lease renewal not confirmed"
		case old.cause != nil && s.cause == nil:
			msg = "lease confirmed again"
		default:
			return // a routine renewal, or one more failed retry
		}
	case n.State == Held:
		msg = "lease held"
		if o.State == Unknown && o.Token == n.Token {
			msg = "lease confirmed again" // the same term, after trouble
		}
	case n.State == Unknown:
		// The first claim's failure counts as a change: until then the
		// cause was only "no answer yet".
		if o.State == Unknown && (old.cause != errNotClaimed || s.cause == errNotClaimed) {
			return
		}
		level, msg = slog.LevelWarn, "lease state unknown"
	case errors.Is(s.cause, errSteppedDown):
		msg, token = "lease stepped down", o.Token
	case errors.Is(s.cause, leasestore.ErrNotHeld) && o.State != NotHeld:
		level, msg, token = slog.LevelWarn, "lease lost", o.Token
	case o.State != NotHeld || o.Holder != n.Holder:
		msg = "lease held by another"
	default:
		return // a claim denied again, by the same holder
	}
	t.logState(level, msg, token, s, latency)
}

// logState writes logChange's record msg, of the change to s, with token
// (0 for none) and latency (or noCall).
func (t *Tracker) logState(level slog.Level, msg string, token uint64, s *snapshot, latency time.Duration) {
	n := s.status
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("lease", t.cfg.Name), slog.String("state", n.State.String()))
	if n.Holder != "" {
		attrs = append(attrs, slog.String("holder", n.Holder))
	}
	if token != 0 {
		attrs = append(attrs, slog.Uint64("token", token))
	}
	if !n.Until.IsZero() && !s.closed && n.State != NotHeld {
		attrs = append(attrs, slog.Time("until", n.Until))
	}
	if s.cause != nil && !s.closed {
		attrs = append(attrs, slog.Any("err", s.cause))
	}
	if latency != noCall {
		attrs = append(attrs, slog.Duration("latency", latency))
	}
	t.cfg.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// logRelease logs the store's answer err to the revoke of the term token:
// Warn if the release could not be confirmed, else Info.
func (t *Tracker) logRelease(token uint64, latency time.Duration, err error) {
	if t.cfg.Logger == nil {
		return
	}
	level, msg := slog.LevelInfo, "lease released"
	if err != nil && !errors.Is(err, leasestore.ErrNotHeld) {
		level, msg = slog.LevelWarn, "lease release not confirmed"
	}
	attrs := []slog.Attr{slog.String("lease", t.cfg.Name), slog.Uint64("token", token)}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	attrs = append(attrs, slog.Duration("latency", latency))
	t.cfg.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// logLeader logs a Lead (or WithLeadership) function starting or ending
// under the term token; err is why it ended: the lease error that ended
// its ctx, or its own error, or nil if it returned nil while leading.
func (t *Tracker) logLeader(msg string, st Status, err error) {
	if t.cfg.Logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("lease", t.cfg.Name), slog.Uint64("token", st.Token)}
	if msg == leaderStarted {
		attrs = append(attrs, slog.Time("until", st.Until))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	t.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
}

// logLate logs the first late renewal of an episode: how late its timer
// fired, and why as far as the process could tell.
func (t *Tracker) logLate(late time.Duration, cause lateCause) {
	if t.cfg.Logger == nil {
		return
	}
	s := t.snap.Load()
	t.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "lease renewal late",
		slog.String("lease", t.cfg.Name), slog.Uint64("token", s.status.Token),
		slog.Time("until", s.status.Until), slog.Duration("late", late), slog.String("cause", cause.String()))
}

const (
	leaderStarted = "lease leader run started"
	leaderEnded   = "lease leader run ended"
)
