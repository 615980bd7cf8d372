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
	// tests only: a fleet's instances decide on Redis's clock. A settle
	// reckons on the clock the decisions use, whichever (hotsettle.go).
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
