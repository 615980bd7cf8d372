package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
)

// DefaultShutdownTimeout bounds a graceful shutdown when the config gives
// no shutdown_timeout.
const DefaultShutdownTimeout = 10 * time.Second

// Options are the daemon's dependencies and knobs that do not come from the
// config file. The zero value is usable: logs are discarded, metrics go to a
// fresh registry, and the config is never reloaded.
type Options struct {
	// Logger receives the daemon's logs; nil discards them.
	Logger *slog.Logger
	// Registry receives the daemon's metrics and is served on /metrics;
	// nil makes a new one.
	Registry *prometheus.Registry
	// ConfigPath is the file the config came from. When set, Run watches it
	// and reloads on change, and Reload rereads it. Empty (the built-in
	// example): the config is fixed.
	ConfigPath string
	// ReloadDebounce is how long the watcher waits for a burst of file
	// events to go quiet; 0 means DefaultReloadDebounce.
	ReloadDebounce time.Duration
	// Overrides are listen addresses from the command line. New takes the
	// config with them applied; every reload applies them again, so the
	// addresses bound at startup stay in force.
	Overrides config.Overrides
	// OnReload, if set, is called after every reload attempt, watcher- or
	// Reload-triggered, from the reloading goroutine (tests wait on it).
	OnReload func(ReloadResult)
	// Now is the clock of the decisions; nil means time.Now. The tests of
	// the documented samples fix it, so the figures they show are exact.
	Now func() time.Time
	// requestClock has a store on Redis decide on Now rather than on
	// Redis's clock (TIME), which a test cannot move: the tests whose
	// scenario spans windows set each step's instant themselves, so it
	// holds however slowly a loaded machine runs them. For this package's
	// tests only: a fleet's instances decide on Redis's clock. A token
	// bucket's settle still times its readings on this machine's clock
	// (hotsettle.go), which is Redis's only with Redis's clock.
	requestClock bool
	// seedTimeout, if set, bounds a refresh's seeds and settles instead
	// of seedTimeout: the same tests give them longer, so that a loaded
	// machine's pause does not leave a move unseeded.
	seedTimeout time.Duration
	// syncLoop, if set, is the interval a sync rule's fleet.Sync runs
	// its batches on and keeps its view for (two of them), given the
	// rule's sync: a test that asserts what no batch has sent yet
	// stretches it past its own deadline, rather than skip the assertion
	// when a loaded machine took a minute (sync's most). For this
	// package's tests only; the rule's interval still names the Sync and
	// its metrics.
	syncLoop func(time.Duration) time.Duration
	// shareTimeout, if set, bounds each of a refresh's exchanges with the
	// fleet's sets instead of HotKeysRefresh: so that a loaded machine's
	// pause does not leave a test's keys unmoved.
	shareTimeout time.Duration
}

// Addrs are the addresses the daemon listens on, with the ports bound
// (useful with ":0" in the config).
type Addrs struct {
	// Each is host:port, or unix:/PATH for a Unix socket.
	API   string // decision API, /metrics, /healthz, /readyz
	Proxy string // reverse proxy; "" when disabled
	GRPC  string // Envoy rate limit service; "" when disabled
}

// Daemon is the `sluice serve` process: the decision API and the reverse
// proxy over one store, with the rules in force swapped atomically on
// reload. Build one with New, run it with Run; Run may be called once.
type Daemon struct {
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	opts    Options

	store      sluice.Store
	sweep      func(time.Time) int         // the memory store's Sweep (on Redis, on_error: local's); nil for Redis otherwise
	ping       func(context.Context) error // store reachability, for /readyz
	watchRedis func(time.Time)             // every RedisWatchInterval on Redis (see watchRunIDs); nil on memory
	closeStore func() error
	lazy       *lazyRedis      // the Redis store, nil on memory: shards, deferral
	fallback   *fleet.Fallback // on_error: local only: while it decides in memory, nothing is sharded
	hot        *hotkeys.Set
	hotAuto    atomic.Pointer[map[string]time.Duration] // the summaries shared with the fleet (rules and descriptors with shards: auto): how long a key stays in the fleet's set
	hotPrefix  string                                   // the Redis keys of the fleet's hot sets: key_prefix + "hot:" + rule
	settleMu   sync.Mutex
	settles    []hotSettle   // this instance's recent moves, read again at its next refreshes (hotsettle.go)
	deferq     *deferq.Queue // nil unless the store is Redis
	fleet      *fleetStore   // the Redis store's router to sync and lease; nil on memory

	apiLn, proxyLn   *listener.Listener
	apiServe         net.Listener   // apiLn, or TLS over it (api.tls)
	tls              []listenerTLS  // the listeners' TLS, read again on reload and when its files change
	certWatcher      *configWatcher // the TLS files; nil without TLS, or if it failed
	proxyServe       net.Listener   // proxyLn, or TLS over it (proxy.tls)
	apiSrv, proxySrv *http.Server
	// The plaintext listeners' fast HTTP/1.1 fronts over apiSrv and
	// proxySrv (package h1); nil with api.tls / proxy.tls.
	apiFront, proxyFront *h1.Server
	grpcLn               net.Listener
	grpcSrv              *server.GRPC
	stopGRPC             context.CancelFunc         // ends grpcSrv.Serve: a graceful stop
	grpcDone             chan error                 // receives Serve's result
	descWatcher          *configWatcher             // the descriptor files; nil without grpc
	tokenWatcher         *configWatcher             // api.token_file; nil without one, or without a config file
	xds                  bool                       // grpc.xds: the descriptors come from an xDS server
	xdsTLS               atomic.Pointer[tls.Config] // grpc.xds.tls's client config, read again by reloads; nil for plaintext
	redisTLS             atomic.Pointer[tls.Config] // store.redis.tls's client config, for each new connection to Redis; nil for plaintext
	xdsRedial            chan struct{}              // tells the subscription that xdsTLS changed (buffered: 1)
	xdsApplied           atomic.Bool                // a config from the xDS server is in force (/readyz)
	xdsDocs              []descriptors.Doc          // the xDS server's configs in force (under reloadMu)
	xdsEpoch             atomic.Uint64              // counts reloads changing grpc.merge_domains (XDSOptions.Epoch)

	cur      atomic.Pointer[generation] // the config and handlers in force
	reloader *reloader                  // nil without ConfigPath
	watcher  *configWatcher             // nil without ConfigPath, or if it failed
	// staleAtStart: the config file changed between the read of the
	// config New was given and the start of the watch.
	staleAtStart bool
	reloadMu     sync.Mutex        // serialises apply; the shutdown takes it before the store closes
	descRefused  [sha256.Size]byte // filesDigest of the descriptor files last refused (reloadMu)
	// descRefusedWhy is the error they were refused with (reloadMu): the
	// same files refused for the same reason are logged and counted once.
	descRefusedWhy string
	descMissing    bool            // a descriptor path found missing since they were last read (reloadMu; logged once)
	certMissing    map[string]bool // the tls: files found missing since they were last read (reloadMu; logged once)
	// certsChanging: the listeners and blocks whose TLS files kept
	// changing while read since they were last read whole (reloadMu;
	// logged once).
	certsChanging map[string]bool
	ran           atomic.Bool
	// stopping: the shutdown has begun (or Close was called). A reload
	// asked for from then on is refused (ErrShuttingDown); one already
	// applying finishes before the store closes.
	stopping atomic.Bool
}

// generation is one applied config: everything a reload replaces.
type generation struct {
	cfg   *config.Config
	rules *rules.Set
	eng   *engine.Engine
	api   http.Handler
	proxy http.Handler // nil without a proxy
	descs *descriptors.Set
	rls   *server.RLS       // nil without grpc
	token [sha256.Size]byte // SHA-256 of api.token_file's token; zero without
}

// New checks cfg for features this version does not enforce, builds the
// store, compiles the rules and binds the listeners (so a busy port is
// reported here, and Addrs is valid as soon as New returns). The caller
// must call Run, or Close if it will not. It is NewContext with a context
// that is never done.
func New(cfg *config.Config, opts Options) (*Daemon, error) {
	return NewContext(context.Background(), cfg, opts)
}

// NewContext is New with a startup that ctx can stop: once ctx is done,
// a Redis connection still being made (which may take up to
// store.redis.timeout, or longer under Sentinel or Cluster discovery) is
// abandoned, what was built is released, and NewContext returns an error
// that wraps ctx.Err(), without binding the listeners. ctx bounds only the
// startup: once NewContext has returned, the daemon does not look at it
// (Run takes its own).
func NewContext(ctx context.Context, cfg *config.Config, opts Options) (*Daemon, error) {
	if cfg == nil {
		return nil, errors.New("daemon: nil config")
	}
	if err := config.Unsupported(cfg); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	d := &Daemon{log: opts.Logger, reg: opts.Registry, opts: opts}
	d.metrics = metrics.New(d.reg)
	if err := d.openStore(ctx, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		d.closeStore()
		return nil, fmt.Errorf("daemon: startup stopped: %w", err)
	}
	if err := d.openFeatures(cfg); err != nil {
		d.closeStore()
		return nil, err
	}
	if err := d.openXDS(cfg); err != nil {
		d.closeStore()
		return nil, err
	}
	gen, err := d.build(cfg, nil)
	var rt *routes
	if err == nil && d.fleet != nil {
		rt, err = d.fleet.prepare(gen.rules, gen.descs)
	}
	if err != nil {
		d.closeStore()
		return nil, err
	}
	d.cur.Store(gen)
	d.useRoutes(rt)
	d.activate(gen)
	d.warnNotRead(gen.descs)
	if opts.ConfigPath != "" {
		// Watch from now on, so no change after New is missed. Not fatal:
		// SIGHUP still reloads.
		if d.watcher, err = newConfigWatcher(opts.ConfigPath); err != nil {
			d.log.Error("config file not watched; reload with SIGHUP", "err", err)
		} else {
			d.watcher.watchWrites()
		}
		// The content the running config came from, so an event that
		// changes nothing reloads nothing. The file is read after the
		// watch starts: a change made since cfg was read (while the store
		// opened and the rules compiled) sent no event, and is applied as
		// soon as Run starts.
		initial, _ := config.ReadFile(opts.ConfigPath)
		sum := sha256.Sum256(initial)
		if parsed, ok := cfg.Digest(); ok && parsed != sum {
			sum, d.staleAtStart = parsed, true
		}
		d.reloader = newReloader(opts.ConfigPath, sum, d.apply, d.log, d.metrics.Reload, opts.OnReload)
		if w := d.watcher; w != nil {
			d.reloader.writing = func() bool { writing, _ := w.writing(); return writing }
			d.reloader.look, d.reloader.still = w.look, w.still
		}
		d.reloader.named, d.reloader.namedWriting, d.reloader.namedGone = d.namedDigest, d.namedWriting, d.namedGone
		d.reloader.namedLook, d.reloader.namedStill = d.namedLook, d.namedStill
	}
	if cfg.GRPC != nil && !usesXDS(cfg) {
		// The descriptor files are watched whether or not the main config
		// is: they change more often than it does.
		if d.descWatcher, err = newConfigWatcher(cfg.GRPC.Config...); err != nil {
			d.log.Error("descriptor files not watched; reload with SIGHUP", "err", err)
		} else {
			d.descWatcher.watchWrites()
		}
	}
	if err := d.listen(cfg); err != nil {
		d.Close()
		return nil, err
	}
	d.watchCerts()
	d.watchToken(cfg)
	return d, nil
}

// Addrs returns the bound addresses. It is valid from New on.
func (d *Daemon) Addrs() Addrs {
	a := Addrs{API: addrOf(d.apiLn)}
	if d.proxyLn != nil {
		a.Proxy = addrOf(d.proxyLn)
	}
	if d.grpcLn != nil {
		a.GRPC = addrOf(d.grpcLn)
	}
	return a
}

// Config returns the config in force (after the last successful reload).
// It must not be modified.
func (d *Daemon) Config() *config.Config { return d.cur.Load().cfg }

// Registry returns the registry the daemon's metrics are on.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Run serves until ctx is done, then shuts down gracefully: the listeners
// close at once, in-flight requests get up to the config's
// shutdown_timeout to finish, and the store is closed. It returns nil after
// a clean shutdown, or the first error that stopped a server. With
// Options.ConfigPath it also watches the file and reloads on change.
func (d *Daemon) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return errors.New("daemon: Run called twice")
	}
	cfg := d.Config()
	d.log.Info("decision API listening", "addr", scheme(d.Addrs().API, cfg.API.TLS)+d.Addrs().API)
	for _, w := range cfg.UnixWarnings() {
		d.log.Warn(strings.TrimPrefix(w.Msg, "warning: "), "key", w.Key)
	}
	if d.proxySrv != nil {
		d.log.Info("proxy listening", "addr", scheme(d.Addrs().Proxy, cfg.Proxy.TLS)+d.Addrs().Proxy, "upstream", cfg.Proxy.Upstream)
	}

	errc := make(chan error, 3)
	serve := func(name string, srv *http.Server, ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("daemon: %s: %w", name, err)
		}
	}
	var wg sync.WaitGroup
	serveFront := func(name string, f *h1.Server, ln net.Listener) {
		if err := f.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("daemon: %s: %w", name, err)
		}
	}
	if d.apiFront != nil {
		wg.Go(func() { serveFront("decision API", d.apiFront, d.apiServe) })
	} else {
		wg.Go(func() { serve("decision API", d.apiSrv, d.apiServe) })
	}
	switch {
	case d.proxyFront != nil:
		wg.Go(func() { serveFront("proxy", d.proxyFront, d.proxyServe) })
	case d.proxySrv != nil:
		wg.Go(func() { serve("proxy", d.proxySrv, d.proxyServe) })
	}
	if d.grpcSrv != nil {
		d.log.Info("Envoy rate limit service listening", "addr", d.Addrs().GRPC, "domains", d.descriptorSet().Domains())
		var grpcCtx context.Context
		grpcCtx, d.stopGRPC = context.WithCancel(context.Background())
		d.grpcDone = make(chan error, 1)
		go func() {
			err := d.grpcSrv.Serve(grpcCtx, d.grpcLn)
			d.grpcDone <- err
			if err != nil {
				errc <- fmt.Errorf("daemon: gRPC: %w", err)
			}
		}()
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if d.sweep != nil {
		wg.Go(func() { onTick(watchCtx, SweepInterval, func(now time.Time) { d.sweep(now) }) })
	}
	if d.watchRedis != nil {
		wg.Go(func() { onTick(watchCtx, RedisWatchInterval, d.watchRedis) })
	}
	if d.watcher != nil {
		defer d.watcher.Close()
		d.watchConfig(watchCtx, &wg)
	}
	if d.descWatcher != nil {
		defer d.descWatcher.Close()
		d.watchDescriptors(watchCtx, &wg)
	}
	if d.xds {
		d.runXDS(watchCtx, &wg)
	}

	if d.tokenWatcher != nil {
		defer d.tokenWatcher.Close()
		d.runWatch(watchCtx, &wg, d.tokenWatcher, make(chan struct{}, 1), func() {}, d.tokenChanged)
	}
	if d.certWatcher != nil {
		defer d.certWatcher.Close()
		// A certificate chain or CA bundle written in place is not read
		// half-written: its first certificates would load.
		d.runWatch(watchCtx, &wg, d.certWatcher, make(chan struct{}, 1), func() {}, d.certsChanged)
	}
	for _, l := range d.tls {
		d.logCert(l, "tls: serving certificate")
	}

	featCtx, stopFeatures := context.WithCancel(ctx)
	defer stopFeatures()
	waitFeatures := d.runFeatures(featCtx)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	stopWatch()
	stopFeatures()
	waitFeatures()
	if err := d.shutdown(); err != nil && runErr == nil {
		runErr = err
	}
	wg.Wait()
	return runErr
}

// shutdown stops accepting, waits for in-flight requests up to the
// shutdown timeout, then closes the store. Requests still running at the
// deadline have their connections closed; that is logged, not returned:
// the shutdown itself succeeded. The error is the store's, if closing it
// fails.
func (d *Daemon) shutdown() error {
	d.stopping.Store(true)
	timeout := d.Config().ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	d.log.Info("shutting down: no new connections; waiting for requests in flight", "shutdown_timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	if d.stopGRPC != nil {
		// Health turns NOT_SERVING, calls in flight finish (bounded by
		// the shutdown timeout, as the HTTP requests), then the store
		// can close.
		d.grpcSrv.SetStopGrace(timeout)
		d.stopGRPC()
		wg.Go(func() { <-d.grpcDone })
	}
	type server interface {
		Shutdown(context.Context) error
		Close() error
	}
	var servers []server
	if d.apiFront != nil {
		servers = append(servers, d.apiFront) // and apiSrv under it
	} else {
		servers = append(servers, d.apiSrv)
	}
	switch {
	case d.proxyFront != nil:
		servers = append(servers, d.proxyFront) // and proxySrv under it
	case d.proxySrv != nil:
		servers = append(servers, d.proxySrv)
	}
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				d.log.Warn("requests still in flight at shutdown_timeout: closing their connections",
					"shutdown_timeout", timeout, "err", err)
				srv.Close()
			}
		})
	}
	wg.Wait()
	d.closeConns()
	if err := d.closeStore(); err != nil {
		err = fmt.Errorf("daemon: close store: %w", err)
		d.log.Error("shutdown", "err", err)
		return err
	}
	d.log.Info("shut down")
	return nil
}

// closeConns closes, once the servers have shut down, the connections
// they leave open: the tunnels of upgraded connections (WebSocket), which
// a shutdown does not wait for, and the proxy's idle upstream
// connections (an upstream that keeps them open would hold them, and the
// daemon's descriptors, after Run has returned). Taking reloadMu, it also
// waits for a reload applying since before the shutdown began: that one
// ends, whole, before the store closes.
func (d *Daemon) closeConns() {
	for _, ln := range []*listener.Listener{d.apiLn, d.proxyLn} {
		if ln != nil {
			ln.CloseHijacked()
		}
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if c, ok := d.cur.Load().proxy.(interface{ Close() }); ok {
		c.Close()
	}
}

// Close releases the listeners and the store of a daemon that will not
// Run. After Run it does nothing.
func (d *Daemon) Close() error {
	d.stopping.Store(true)
	if d.ran.Swap(true) {
		return nil
	}
	lns := []net.Listener{d.grpcLn}
	for _, ln := range []*listener.Listener{d.apiLn, d.proxyLn} {
		if ln != nil {
			lns = append(lns, ln)
		}
	}
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
	if d.watcher != nil {
		d.watcher.Close()
	}
	if d.descWatcher != nil {
		d.descWatcher.Close()
	}
	if d.certWatcher != nil {
		d.certWatcher.Close()
	}
	if d.tokenWatcher != nil {
		d.tokenWatcher.Close()
	}
	return d.closeStore()
}
