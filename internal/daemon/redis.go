package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/redisstore"
)

// RedisWatchInterval is how often the daemon asks Redis for its run_ids
// (redisstore.Store.RunIDs): when they change (a restart, a failover), the
// over-limit cache forgets its refusals, as it does on a failed call, the
// leases drop their units and the syncs their views (see watchRunIDs).
const RedisWatchInterval = time.Second

// ConnectRetry is how often the daemon tries to connect to a Redis that
// did not answer at startup.
const ConnectRetry = time.Second

// openRedis builds the Redis store of cfg, stacked as a fleet runs it:
//
//	Fallback (on_error: local only) → OverLimitCache → fleetStore → Redis
//
// where fleetStore sends the requests of rules with sync or lease to their
// fleet.Sync or fleet.Lease (see fleet.go), and the others to Redis.
//
// The over-limit cache is always on: it answers requests Redis is known to
// refuse without a round trip, exactly. With on_error: local the Fallback
// decides in memory at rate / expected_instances while Redis cannot.
//
// Redis need not answer at startup: the daemon then starts anyway, connects
// in the background (every ConnectRetry), answers per store.on_error
// meanwhile, and /readyz fails until it has connected. Once ctx is done
// (the startup stopped, see NewContext), the connection still being made
// is abandoned and openRedis returns an error that wraps ctx's.
func (d *Daemon) openRedis(ctx context.Context, cfg *config.Config) error {
	opts, err := d.redisOptions(cfg)
	if err != nil {
		return err
	}
	lazy, err := newLazyRedis(ctx, opts, d.log)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("daemon: store.redis: startup stopped while connecting to %v: %w", cfg.Store.Redis.Addrs, err)
		}
		return fmt.Errorf("daemon: store.redis: %w; %s", err, refusalHint(err))
	}
	d.lazy = lazy
	fs := newFleetStore(lazy, d.reg, d.opts.Now)
	fs.syncLoop = d.opts.syncLoop
	d.fleet = fs
	// On Redis' clock (RedisTime): refusals end by the monotonic clock
	// too, whatever the daemon's wall clock does.
	cache := fleet.NewOverLimitCache(fs, fleet.OverLimitOptions{StoreClock: !d.opts.requestClock})
	d.store = cache
	d.subscribeRefunds(ctx, cfg, lazy, fs, cache)
	d.ping = lazy.Ping
	d.watchRedis = watchRunIDs(lazy, func() {
		// The decorators first: a refusal they decide from the old state
		// until then is asked before the cache forgets, which drops it.
		if err := fs.Lost(); err != nil {
			d.log.Warn("fleet: sending sync hits after Redis changed (sent again with the next batch)", "err", err)
		}
		cache.Forget()
	}, d.log)
	d.redisMetrics(lazy, cache)
	closers := []func(){func() {
		if err := fs.Close(); err != nil {
			d.log.Warn("fleet: handing back sync hits or leases at shutdown", "err", err)
		}
	}, lazy.Close}
	if cfg.Store.OnError == engine.OnErrorLocal {
		fb := d.localFallback(cfg, lazy, cache)
		closers = append([]func(){fb.Close}, closers...)
	}
	d.closeStore = func() error {
		for _, c := range closers {
			c()
		}
		return nil
	}
	return nil
}

// redisOptions returns the options of cfg's Redis store, checked, its TLS
// config (if on) read from its files and kept in d.redisTLS for the
// connections to come.
func (d *Daemon) redisOptions(cfg *config.Config) (redisstore.Options, error) {
	r := cfg.Store.Redis
	var tlsConfig *tls.Config
	if r.TLS.On {
		// The same for the Sentinels and every Cluster node
		// (redisstore.Options.TLS). The files were checked before
		// (config.TLSProblems); read here again, a change since is told.
		// Each new connection takes the files' latest reading
		// (redisTLS, see redistls.go): a rotated client certificate
		// or CA bundle is used from the next reconnection.
		var err error
		if tlsConfig, err = loadRedisTLS(cfg); err != nil {
			return redisstore.Options{}, fmt.Errorf("daemon: %w", err)
		}
		d.redisTLS.Store(tlsConfig)
	}
	descs, _ := LoadDescriptors(cfg) // an error is told when the rules are built
	opts := redisstore.Options{
		Addrs:    r.Addrs,
		Cluster:  r.Cluster,
		Sentinel: r.Sentinel,
		Username: r.Username,
		Password: r.Password,
		DB:       r.DB,

		SentinelCredentials: r.SentinelCredentials(),
		TLS:                 tlsConfig,
		TLSFunc:             d.redisTLS.Load,
		Timeout:             r.Timeout,
		Prefix:              r.KeyPrefix,
		RedisTime:           !d.opts.requestClock,

		MaxFlushDelay: r.MaxFlushDelay,
		Needs:         redisNeeds(cfg, descs, redisPrefix(cfg)),
		// For the other instances' over-limit caches (see subscribeRefunds).
		PublishRefunds: true,
	}
	if err := opts.Validate(); err != nil {
		return redisstore.Options{}, fmt.Errorf("daemon: store.redis: %w", err)
	}
	return opts, nil
}

// subscribeRefunds makes the over-limit cache forget a key when a refund
// made through another instance is published by its script. The cache
// answers only while subscribed (paused until the store connects and Redis
// confirms the subscription, and whenever it is cut). Connected at
// startup, the daemon starts with the cache subscribed: this waits for it
// as long as for the connection (store.redis.timeout, at least 1s), or
// until ctx is done, and warns if Redis has not confirmed by then.
func (d *Daemon) subscribeRefunds(ctx context.Context, cfg *config.Config, lazy *lazyRedis, fs *fleetStore, cache *fleet.OverLimitCache) {
	feed := &refundFeed{OverLimitCache: cache, fleet: fs, live: make(chan struct{})}
	lazy.watchRefunds(feed)
	if !lazy.Connected() {
		return
	}
	t := time.NewTimer(max(cfg.Store.Redis.Timeout, time.Second))
	select {
	case <-feed.live:
	case <-t.C:
		d.log.Warn("over-limit cache: Redis has not confirmed the subscription to refunds yet; every request goes to Redis until it does", "channel", redisstore.RefundChannelOf(redisPrefix(cfg), cfg.Store.Redis.DB))
	case <-ctx.Done():
	}
	t.Stop()
}

// redisMetrics registers the metrics of the Redis servers' versions and of
// the over-limit cache.
func (d *Daemon) redisMetrics(lazy *lazyRedis, cache *fleet.OverLimitCache) {
	// 1 until a server that replaced another is too old for the config
	// in force (see watchRunIDs); /readyz does not fail for it.
	_ = d.metrics.GaugeFunc("sluice_redis_version_ok", "1 while every Redis server is recent enough for the config in force, 0 once one that took another's place (a failover, a restart) is too old for a feature it uses.",
		func() float64 {
			if lazy.tooOld.Load() {
				return 0
			}
			return 1
		})
	_ = d.metrics.CounterFunc("sluice_overlimit_cache_hits_total", "Requests refused by the over-limit cache without a Redis call.",
		func() float64 { return float64(cache.Hits()) })
	_ = d.metrics.GaugeFunc("sluice_overlimit_cache_keys", "Over-limit keys the cache remembers.", func() float64 { return float64(cache.Len()) })
}

// localFallback puts a fleet.Fallback (store.on_error: local) in front of
// cache, deciding in memory at rate / expected_instances while Redis
// cannot, and returns it. It becomes d's store and fallback, its mode is
// logged as it changes and told by /readyz, its metrics registered, and
// its keys swept as the memory store's are: otherwise the keys of an
// outage stayed once Redis was back, up to the local store's bound, for as
// long as the daemon ran.
func (d *Daemon) localFallback(cfg *config.Config, lazy *lazyRedis, cache *fleet.OverLimitCache) *fleet.Fallback {
	fb := fleet.NewFallback(cache, fleet.FallbackOptions{
		ExpectedInstances: cfg.Store.ExpectedInstances,
		Probe:             lazy.Ping,
		StartLocal:        !lazy.Connected(),
		OnModeChange: func(m fleet.Mode, err error) {
			if m == fleet.ModeLocal {
				d.log.Warn("Redis unavailable: deciding locally (store.on_error: local)", "expected_instances", cfg.Store.ExpectedInstances, "err", err)
			} else {
				d.log.Info("Redis answers again: deciding on Redis")
			}
		},
	})
	d.store = fb
	d.fallback = fb
	n := cfg.Store.ExpectedInstances
	d.ping = func(ctx context.Context) error {
		// /readyz says which mode the daemon decides in, and is
		// ready only on Redis: once Redis answers again, the daemon
		// still decides locally until its next probe moves it back.
		local := fb.Mode() == fleet.ModeLocal
		err := lazy.Ping(ctx)
		switch {
		case local && err == nil:
			return fmt.Errorf("deciding locally at rate/%d (store.on_error: local): Redis answers again, back on it within %v", n, fleet.DefaultProbeInterval)
		case local:
			return fmt.Errorf("deciding locally at rate/%d (store.on_error: local): %w", n, err)
		}
		return err
	}
	_ = d.metrics.GaugeFunc("sluice_store_local", "1 while the daemon decides in memory because Redis is unavailable (store.on_error: local), else 0.",
		func() float64 { return float64(fb.Mode()) })
	_ = d.metrics.CounterFunc("sluice_store_local_decisions_total", "Decisions made in memory under store.on_error: local.",
		func() float64 { return float64(fb.LocalDecisions()) })
	_ = d.metrics.CounterFunc("sluice_store_local_switches_total", "Times the daemon moved to local decisions because Redis was unavailable.",
		func() float64 { return float64(fb.Switches()) })
	_ = d.metrics.GaugeFunc("sluice_store_local_keys", "Keys held in memory for local decisions (store.on_error: local).",
		func() float64 { return float64(fb.Local().Len()) })
	_ = d.metrics.CounterFunc("sluice_store_local_refunds_dropped_total", "Units given back in local mode that Redis had counted, dropped: Redis could not take them back (store.on_error: local).",
		func() float64 { return float64(fb.RefundsDropped()) })
	d.sweep = fb.Sweep
	return fb
}

// watchRunIDs returns the daemon's Redis watch, called every
// RedisWatchInterval: when the servers' run_ids differ from the last ones
// read, it calls lost, which makes the over-limit cache forget every
// refusal and the fleet decorators let go of what they read (see
// fleetStore.Lost). All are the old servers' counts; a server that
// restarted without persistence, or a replica promoted before it had every
// count, admits sooner, and never counted the units held. The cache also
// forgets on a failed call, but after a restart while the daemon was idle
// no call fails (the connection is redialled), and the keys refused
// locally never reach Redis to find out.
//
// Each answer also tells the servers' versions (the same INFO replies):
// they are checked against what the config in force needs
// (lazyRedis.checkVersions), as at connect, since a server that took
// another's place (a failover to a replica on an older Redis, a restart
// on an older binary, a Cluster node added) was never checked, and a
// feature it lacks fails at every call as an unknown command, taken for
// an outage. One too old is logged at ERROR, once until the answer
// changes, and l.tooOld is set (sluice_redis_version_ok) until a check
// passes: a good server back, or a reload that leaves the feature out.
// /readyz does not fail for it: every instance of a fleet sees the same
// servers, and a fleet not ready everywhere would turn one old replica
// into a full outage, where only the features it lacks fail.
func watchRunIDs(l *lazyRedis, lost func(), log *slog.Logger) func(time.Time) {
	var last, told string // told: the version refusal last logged
	return func(time.Time) {
		if last == "" {
			// Read at connect, before any decision: the first refusals
			// may come from a server that restarts before the first tick.
			if p := l.ids.Load(); p != nil {
				last = *p
			}
		}
		ids, err := l.RunIDs(context.Background())
		if err != nil {
			return // down: the next answer tells whether it restarted
		}
		if last != "" && ids != last {
			lost()
			log.Info("Redis restarted or failed over (its run_id changed): cached refusals, lease units and sync views let go", "run_ids", ids)
		}
		last = ids
		verr := l.checkVersions()
		l.tooOld.Store(verr != nil)
		switch {
		case verr != nil && verr.Error() != told:
			told = verr.Error()
			log.Error("Redis is too old for the config: a server that took another's place (a failover, a restart) lacks what a feature runs, which fails at every call; "+refusalHint(verr), "err", verr)
		case verr == nil && told != "":
			told = ""
			log.Info("Redis is recent enough for the config again")
		}
	}
}

// refundFeed is the over-limit cache as redisstore.Store.WatchRefunds
// tells it of refunds; live is closed at its first Resume (subscribed).
// The leases (fleet) are told of each key too: one refusing a key on its
// own asks Redis again.
type refundFeed struct {
	*fleet.OverLimitCache
	fleet *fleetStore
	once  sync.Once
	live  chan struct{}
}

// ForgetKey tells the leases before the cache: a request the cache lets
// through once it forgot must not find a lease still refusing on its
// own, whose refusal the cache would remember again.
func (f *refundFeed) ForgetKey(ns, key string) {
	f.fleet.ForgetKey(ns, key)
	f.OverLimitCache.ForgetKey(ns, key)
}

func (f *refundFeed) Resume() {
	f.OverLimitCache.Resume()
	f.once.Do(func() { close(f.live) })
}

// refusalHint tells what to check when Redis refused the connection.
func refusalHint(err error) string {
	names, name, mismatch := redisstore.TLSNameMismatch(err)
	if tooOld, sentinel := redisstore.UsernameTooOld(err); tooOld {
		if sentinel {
			return "store.redis.sentinel_username (left out, the Sentinels get store.redis.username) needs Sentinels of Redis 6.2 or later: upgrade the Sentinels, or give them store.redis.sentinel_password alone"
		}
		return "store.redis.username needs Redis 6.0 or later: upgrade Redis, or leave store.redis.username out and give store.redis.password alone (Redis's requirepass)"
	}
	switch {
	case errors.Is(err, redisstore.ErrDB):
		return "check store.redis.db: Redis has databases 0 to its databases setting less one (0 to 15 by default)"
	case redisstore.StoreTooOld(err):
		return "upgrade Redis: Sluice needs Redis 5.0 or later whatever the config (its scripts read Redis's TIME before they write)"
	case errors.Is(err, redisstore.ErrVersion):
		return "upgrade Redis, or leave out the feature that needs the newer one"
	case redisstore.SentinelRefused(err):
		return "check store.redis.sentinel_username and store.redis.sentinel_password (left out, the Sentinels get store.redis.username and password), and the Sentinels' requirepass or ACL users (a Sentinel user needs SENTINEL SENTINELS and GET-MASTER-ADDR-BY-NAME, and allchannels or the failover channels)"
	case !errors.Is(err, redisstore.ErrTLS):
	case redisstore.TLSNeeded(err):
		return "set store.redis.tls: Redis serves only TLS at that address, and the connection does not use it"
	case redisstore.TLSRefusedByRedis(err):
		return "Redis refused this client's TLS: check store.redis.tls.cert and store.redis.tls.key (with tls-auth-clients, Redis wants a client certificate that its tls-ca-cert-file signed)"
	case mismatch:
		return fmt.Sprintf("check store.redis.tls.server_name: Redis's certificate is for %v, not %s (left out, server_name is the host of each address)", names, name)
	default:
		return "check store.redis.tls.ca and Redis's certificate (without ca, verified against the system's CA roots; on Linux SSL_CERT_FILE or SSL_CERT_DIR name others)"
	}
	return "check store.redis.username and store.redis.password, and what Redis's ACL lets that user run"
}
