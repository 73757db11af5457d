package dialer

import "time"

// Backoff exposes the pause after round failed rounds.
func (d *Dialer) Backoff(round int) time.Duration { return d.retry.Next(round + 1) }

// Defaults exposes the defaults applied to cfg.
func Defaults(cfg Config) Config { return cfg.withDefaults() }

// LocalAddrs exposes the loopback addresses the dialer uses.
func (d *Dialer) LocalAddrs() []string { return d.local }
