package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
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
			return fmt.Errorf("daemon: %w", err)
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
		// For the other instances' over-limit caches (see below).
		PublishRefunds: true,
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("daemon: store.redis: %w", err)
	}
	lazy, err := newLazyRedis(ctx, opts, d.log)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("daemon: store.redis: startup stopped while connecting to %v: %w", r.Addrs, err)
		}
		return fmt.Errorf("daemon: store.redis: %w; %s", err, refusalHint(err))
	}
	d.lazy = lazy
	fs := newFleetStore(lazy, d.reg, d.opts.Now)
	d.fleet = fs
	// On Redis' clock (RedisTime): refusals end by the monotonic clock
	// too, whatever the daemon's wall clock does.
	cache := fleet.NewOverLimitCache(fs, fleet.OverLimitOptions{StoreClock: !d.opts.requestClock})
	d.store = cache
	// A refund made through another instance is published by its script
	// and heard here: the cache forgets the key. The cache answers only
	// while subscribed (paused until the store connects and Redis
	// confirms the subscription, and whenever it is cut). Connected at
	// startup, the daemon starts with the cache subscribed, waiting for
	// it as long as for the connection.
	feed := &refundFeed{OverLimitCache: cache, fleet: fs, live: make(chan struct{})}
	lazy.watchRefunds(feed)
	if lazy.Connected() {
		t := time.NewTimer(max(r.Timeout, time.Second))
		select {
		case <-feed.live:
		case <-t.C:
			d.log.Warn("over-limit cache: Redis has not confirmed the subscription to refunds yet; every request goes to Redis until it does", "channel", redisstore.RefundChannelOf(redisPrefix(cfg), r.DB))
		case <-ctx.Done():
		}
		t.Stop()
	}
	d.ping = lazy.Ping
	d.watchRedis = watchRunIDs(lazy, func() {
		// The decorators first: a refusal they decide from the old state
		// until then is asked before the cache forgets, which drops it.
		if err := fs.Lost(); err != nil {
			d.log.Warn("fleet: sending sync hits after Redis changed (sent again with the next batch)", "err", err)
		}
		cache.Forget()
	}, d.log)
	// 1 until a server that replaced another is too old for the config
	// in force (see watchRunIDs); /readyz does not fail for it.
	_ = d.metrics.GaugeFunc("sluice_redis_version_ok", "1 while every Redis server is recent enough for the config in force, 0 once one that took another's place (a failover, a restart) is too old for a feature it uses.",
		func() float64 {
			if lazy.tooOld.Load() {
				return 0
			}
			return 1
		})
	closers := []func(){func() {
		if err := fs.Close(); err != nil {
			d.log.Warn("fleet: handing back sync hits or leases at shutdown", "err", err)
		}
	}, lazy.Close}
	_ = d.metrics.CounterFunc("sluice_overlimit_cache_hits_total", "Requests refused by the over-limit cache without a Redis call.",
		func() float64 { return float64(cache.Hits()) })
	_ = d.metrics.GaugeFunc("sluice_overlimit_cache_keys", "Over-limit keys the cache remembers.", func() float64 { return float64(cache.Len()) })
	if cfg.Store.OnError == engine.OnErrorLocal {
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
		closers = append([]func(){fb.Close}, closers...)
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
		// The keys of an outage are swept as the memory store's are:
		// otherwise they stayed once Redis was back, up to the local
		// store's bound, for as long as the daemon ran.
		d.sweep = fb.Sweep
	}
	d.closeStore = func() error {
		for _, c := range closers {
			c()
		}
		return nil
	}
	return nil
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

// lazyRedis is a redisstore.Store that may not be connected yet: until it
// is, every call fails with sluice.ErrStoreUnavailable, and a goroutine
// tries to connect every ConnectRetry.
type lazyRedis struct {
	s      atomic.Pointer[redisstore.Store]
	ids    atomic.Pointer[string] // the servers' run_ids when it connected (watchRunIDs)
	tooOld atomic.Bool            // the last checkVersions failed (watchRunIDs)
	cancel context.CancelFunc
	ctx    context.Context // done at Close
	up     chan struct{}   // closed once s is set
	wg     sync.WaitGroup

	// mu orders a reload's check and setNeeds (see hold) with connect's
	// keeping s: a connection is kept only once it has checked the needs
	// in force then.
	mu    sync.Mutex
	needs *[]redisstore.Need // the ACL check's, for the next connect (see setNeeds)
	// inForce is needs, read without mu: by the version check of each
	// tick (checkVersions), which a reload's check must not hold up.
	inForce atomic.Pointer[[]redisstore.Need]
}

var errNotConnected = fmt.Errorf("daemon: not connected to Redis yet: %w", sluice.ErrStoreUnavailable)

// refusalHint tells what to check when Redis refused the connection.
func refusalHint(err error) string {
	var he x509.HostnameError
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
	case errors.As(err, &he):
		names := slices.Clone(he.Certificate.DNSNames)
		for _, ip := range he.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return fmt.Sprintf("check store.redis.tls.server_name: Redis's certificate is for %v, not %s (left out, server_name is the host of each address)", names, he.Host)
	default:
		return "check store.redis.tls.ca and Redis's certificate (without ca, verified against the system's CA roots; on Linux SSL_CERT_FILE or SSL_CERT_DIR name others)"
	}
	return "check store.redis.username and store.redis.password, and what Redis's ACL lets that user run"
}

// newLazyRedis connects with o, waiting at most o's timeout (at least a
// second); if that fails it returns a store that keeps trying. Redis
// refusing the credentials, TLS or the database, or too old for the
// config (redisstore.ErrAuth, ErrTLS, ErrDB, ErrVersion), is no outage
// but a mistake in the config, which waiting does not mend: newLazyRedis
// returns it, and the daemon does not start. start bounds
// the first attempt only: once it is done, newLazyRedis gives up at once
// and returns start.Err(); the store it returns
// otherwise keeps trying whatever becomes of start.
func newLazyRedis(start context.Context, o redisstore.Options, log *slog.Logger) (*lazyRedis, error) {
	l := &lazyRedis{needs: &o.Needs, up: make(chan struct{})}
	l.inForce.Store(&o.Needs)
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx, l.cancel = ctx, cancel
	err := l.connect(start, o)
	if err := start.Err(); err != nil {
		// Connected or not, the startup has stopped.
		l.Close()
		return nil, err
	}
	if err == nil {
		return l, nil
	}
	if refusal(err) {
		cancel()
		return nil, err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(ConnectRetry)
		defer t.Stop()
		told := false // the last failure logged was a refusal
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := l.connect(ctx, o)
			if err == nil {
				log.Info("connected to Redis", "addrs", o.Addrs, "attempts", n+1)
				return
			}
			// Logged at the first attempt, every 60th, and when the
			// failure changes from one kind to the other.
			refused := refusal(err)
			if n != 1 && n%60 != 0 && refused == told {
				continue
			}
			told = refused
			if refused {
				// Redis came up refusing the config's credentials or TLS
				// (changed meanwhile), or a feature's commands (a reload
				// added it, see connect): no outage.
				log.Error("Redis refused the connection; retrying: "+refusalHint(err), "addrs", o.Addrs, "every", ConnectRetry, "err", err)
			} else {
				log.Warn("Redis does not answer; retrying", "addrs", o.Addrs, "every", ConnectRetry, "err", err)
			}
		}
	}()
	return l, nil
}

// refusal reports whether err (of redisstore.New) is Redis refusing
// the config (redisstore.ErrAuth, ErrTLS, ErrDB), or too old for it
// (ErrVersion), rather than an outage.
func refusal(err error) bool {
	return errors.Is(err, redisstore.ErrAuth) || errors.Is(err, redisstore.ErrTLS) || errors.Is(err, redisstore.ErrDB) ||
		errors.Is(err, redisstore.ErrVersion)
}

func (l *lazyRedis) connect(ctx context.Context, o redisstore.Options) error {
	ctx, cancel := context.WithTimeout(ctx, max(o.Timeout, time.Second))
	defer cancel()
	l.mu.Lock()
	needs := l.needs
	l.mu.Unlock()
	o.Needs = *needs
	s, err := redisstore.New(ctx, o)
	if err != nil {
		return err
	}
	if ids, err := s.RunIDs(ctx); err == nil {
		l.ids.Store(&ids)
	}
	for {
		// A reload while New ran found no store, and left its needs to
		// this connection (setNeeds): checked here, or its feature would
		// run unchecked, failing NOPERM at every turn.
		l.mu.Lock()
		if l.needs == needs {
			l.s.Store(s)
			close(l.up)
			l.mu.Unlock()
			return nil
		}
		needs = l.needs
		l.mu.Unlock()
		if err := s.Require(ctx, *needs); err != nil {
			s.Close()
			return err
		}
	}
}

// hold keeps connect from keeping a connection it made until release is
// called: a reload holds it from its check to its setNeeds, so that a
// connection made meanwhile is kept only once it has checked the needs
// the reload left in force (a refused reload's: those before it).
func (l *lazyRedis) hold() (release func()) {
	l.mu.Lock()
	return l.mu.Unlock
}

// check asks Redis, when connected, whether the user's ACL lets it run
// needs (see redisNeeds; redisstore.Store.Require): one it lacks is an
// ErrAuth error. Not connected, there is no one to ask: needs are checked
// when the store connects, if they are made the store's by setNeeds.
// The caller holds l (hold).
func (l *lazyRedis) check(ctx context.Context, needs []redisstore.Need) error {
	if s := l.s.Load(); s != nil {
		if err := s.Require(ctx, needs); err != nil && (errors.Is(err, redisstore.ErrAuth) || errors.Is(err, redisstore.ErrVersion)) {
			return err
		}
	}
	return nil
}

// checkVersions checks the versions of the servers the last RunIDs met
// against the needs in force (redisstore.Store.CheckVersions); nil until
// connected.
func (l *lazyRedis) checkVersions() error {
	s := l.s.Load()
	if s == nil {
		return nil
	}
	return s.CheckVersions(*l.inForce.Load())
}

// setNeeds makes needs those the store's ACL check asks for when it
// connects, even a connection already being made (see connect): the
// needs of the config in force, set once a reload applies (a refused
// one's would refuse a connection that the config in force does not
// need refused, or let one through that it does). The caller holds l
// (hold) since its check.
func (l *lazyRedis) setNeeds(needs []redisstore.Need) { l.needs = &needs; l.inForce.Store(&needs) }

// watchRefunds tells lst of the refunds published to the fleet
// (redisstore.Store.WatchRefunds) from when the store connects until
// Close; lst is paused until then.
func (l *lazyRedis) watchRefunds(lst redisstore.RefundListener) {
	lst.Pause()
	l.wg.Go(func() {
		select {
		case <-l.ctx.Done():
			return
		case <-l.up:
		}
		_ = l.s.Load().WatchRefunds(l.ctx, lst)
	})
}

// Connected reports whether the store has connected.
func (l *lazyRedis) Connected() bool { return l.s.Load() != nil }

func (l *lazyRedis) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, errNotConnected
	}
	return s.Take(ctx, r)
}

func (l *lazyRedis) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.TakeAll(ctx, rs, ds)
}

// Refund gives units back (sluice.Refunder), once connected.
func (l *lazyRedis) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, errNotConnected
	}
	return s.Refund(ctx, r)
}

func (l *lazyRedis) Reset(ctx context.Context, r sluice.Request) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Reset(ctx, r)
}

// Ping reports whether Redis answers (for /readyz and the fallback's
// probe); it fails until the store has connected.
func (l *lazyRedis) Ping(ctx context.Context) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Ping(ctx)
}

// RunIDs identifies the Redis servers (redisstore.Store.RunIDs); it fails
// until the store has connected.
func (l *lazyRedis) RunIDs(ctx context.Context) (string, error) {
	s := l.s.Load()
	if s == nil {
		return "", errNotConnected
	}
	return s.RunIDs(ctx)
}

// Close stops connecting and closes the connections.
func (l *lazyRedis) Close() {
	l.cancel()
	l.wg.Wait()
	if s := l.s.Load(); s != nil {
		s.Close()
	}
}
