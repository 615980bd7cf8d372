package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// openStore builds the store of cfg.Store. The store lives as long as the
// daemon: reloads keep it, so counters survive them.
//
// The Redis store takes its time from Redis (TIME inside the script), so a
// fleet of daemons decides alike however far apart their clocks are. Redis
// need not answer at startup (see openRedis): requests follow
// store.on_error while Redis is unreachable, and /readyz answers 503 until
// it answers. ctx bounds the startup (see NewContext).
func (d *Daemon) openStore(ctx context.Context, cfg *config.Config) error {
	switch cfg.Store.Type {
	case "", "memory":
		s := memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys})
		d.store = s
		d.sweep = s.Sweep
		d.ping = func(context.Context) error { return nil }
		d.closeStore = func() error { return nil }
		_ = d.metrics.GaugeFunc("sluice_memstore_keys", "Keys held by the memory store.", func() float64 { return float64(s.Len()) })
		_ = d.metrics.CounterFunc("sluice_memstore_evictions_total", "Keys the memory store evicted before they were at rest, to respect store.max_keys.",
			func() float64 { return float64(s.Evictions()) })
		return nil
	case "redis":
		return d.openRedis(ctx, cfg)
	}
	return fmt.Errorf("daemon: store.type: unknown store %q", cfg.Store.Type)
}

// SweepInterval is how often the daemon deletes the memory store's keys at
// rest, handing memory back after a burst of keys even when no new keys
// arrive (the store also sweeps a little as keys arrive).
const SweepInterval = time.Minute

// onTick calls f(now) every interval until ctx is done: the memory store's
// sweep and the hot-key refresh. Tests drive it with testing/synctest.
func onTick(ctx context.Context, interval time.Duration, f func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}
