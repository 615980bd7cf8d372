package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/daemon"
	"github.com/sluicehq/sluice/internal/rules"
)

// builtinName is the file name errors and logs use for the built-in
// example config.
const builtinName = "built-in example"

// overrideFlags defines on fs the flags that override the config's
// listen addresses, to be set in o: serve's, which check-config takes
// too, so that it checks the addresses serve would listen on.
func overrideFlags(fs *flag.FlagSet, o *config.Overrides) {
	fs.StringVar(&o.Listen, "listen", "", "decision API `address` (host:port, or unix:/PATH for a Unix socket), overriding the config's listen; port 0 picks a free port")
	fs.StringVar(&o.ProxyListen, "proxy-listen", "", "reverse proxy `address`, overriding proxy.listen; port 0 picks a free port")
	fs.StringVar(&o.GRPCListen, "grpc-listen", "", "gRPC service `address` (host:port, or unix:/PATH), overriding grpc.listen; port 0 picks a free port")
}

// serve runs the daemon until ctx is cancelled (SIGINT/SIGTERM): exit 0
// after a clean shutdown (or when ctx ends during startup: nothing is
// served), 1 when the config is bad or a listener cannot be bound, 2 for
// bad flags. SIGHUP rereads the config file.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// SIGHUP is caught from the start: startup can take a while (Redis
	// dialled under on_error: local), and a SIGHUP's default action would
	// kill the process. One sent meanwhile reloads once the daemon runs.
	// It stays caught after serve returns (signal.Stop would give the
	// default action back, between the shutdown and the exit).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	configPath, over, code, ok := serveFlags(args, stderr)
	if !ok {
		return code
	}
	cfg, logger, code, ok := serveConfig(configPath, over, stderr)
	if !ok {
		return code
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if ctx.Err() != nil {
		logger.Info("stopped during startup: nothing served")
		return 0
	}
	d, code, ok := startDaemon(ctx, cfg, daemon.Options{Logger: logger, Registry: reg, ConfigPath: configPath, Overrides: over}, stderr)
	if !ok {
		return code
	}

	floorCtx, stopFloor := context.WithCancel(ctx)
	defer stopFloor()
	go keepHeapFloor(floorCtx, time.Second)

	printBanner(stdout, cfg, d.Addrs(), configPath)

	// SIGHUPs are handled until Run has returned: one during the
	// shutdown is told and ignored (the daemon refuses to reload then:
	// the requests in flight finish under the config they began with).
	ran, hupDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hupDone)
		reloadOnHUP(ctx, hup, ran, d, logger, configPath)
	}()

	err := d.Run(ctx)
	close(ran)
	<-hupDone
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	return 0
}

// serveFlags parses serve's flags: the config file ("" for the built-in
// example) and the listen addresses that override the config's. When
// serve is to end (-h, bad flags, an argument), it tells why on stderr and
// returns false with the exit code: 0 for -h, 2 otherwise.
func serveFlags(args []string, stderr io.Writer) (configPath string, over config.Overrides, code int, ok bool) {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&configPath, "config", "", "config `file` (default: a built-in example on the memory store)")
	overrideFlags(fs, &over)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice serve [-config FILE] [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", over, 0, false
		}
		return "", over, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return "", over, 2, false
	}
	return configPath, over, 0, true
}

// serveConfig loads the config file (the built-in example for ""), applies
// the flags' overrides and makes the logger, writing to stderr at the
// config's log_level. On a problem it tells it on stderr and returns false
// with the exit code: 2 for an override the config refuses, 1 otherwise.
func serveConfig(configPath string, over config.Overrides, stderr io.Writer) (_ *config.Config, _ *slog.Logger, code int, ok bool) {
	var (
		cfg *config.Config
		err error
	)
	if configPath == "" {
		cfg, err = config.Parse(builtinName, config.Example())
	} else {
		cfg, err = config.Load(configPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: invalid config:\n%v\n", err)
		return nil, nil, 1, false
	}
	if err := over.Apply(cfg); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return nil, nil, 2, false
	}
	level := new(slog.LevelVar)
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil && cfg.LogLevel != "" {
		fmt.Fprintf(stderr, "sluice serve: log_level: %v\n", err)
		return nil, nil, 1, false
	}
	return cfg, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), 0, true
}

// startDaemon makes the daemon: its stores connected, its listeners bound.
// ctx stops the startup too: a SIGINT or SIGTERM while it dials a Redis
// that does not answer ends it at once, not after store.redis.timeout. When
// serve is to end, it returns false with the exit code: 0 when ctx ended
// (nothing served, and o.Logger says so), 1 when the daemon could not be
// made (told on stderr, with a hint when an address is in use).
func startDaemon(ctx context.Context, cfg *config.Config, o daemon.Options, stderr io.Writer) (_ *daemon.Daemon, code int, ok bool) {
	d, err := daemon.NewContext(ctx, cfg, o)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		o.Logger.Info("stopped during startup: nothing served")
		return nil, 0, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		if errors.Is(err, syscall.EADDRINUSE) {
			addrInUse(stderr, o.ConfigPath, o.Overrides.Listen)
		}
		return nil, 1, false
	}
	if ctx.Err() != nil {
		// SIGINT or SIGTERM once New had connected: the listeners are
		// bound but have served nothing, and their addresses were never
		// told.
		err := d.Close()
		o.Logger.Info("stopped during startup: nothing served")
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return nil, 1, false
		}
		return nil, 0, false
	}
	return d, 0, true
}

// addrInUse tells on stderr what to do about a listen address in use:
// configPath is the config file ("" for the built-in example), listen the
// -listen flag's address.
func addrInUse(stderr io.Writer, configPath, listen string) {
	switch {
	case configPath == "" && listen != "":
		// The built-in example has one listener, and the user chose its address.
		fmt.Fprintf(stderr, "sluice serve: the -listen address %s is in use (is another sluice running?); "+
			"pick another (-listen 127.0.0.1:0 for any free port)\n", listen)
	case configPath == "":
		fmt.Fprintln(stderr, "sluice serve: the built-in example's port is busy (is another sluice running?); "+
			"free it, or pick another with -listen ADDR (-listen 127.0.0.1:0 for any free port)")
	default:
		fmt.Fprintln(stderr, "sluice serve: a listen address is in use (is another sluice running?); "+
			"-listen, -proxy-listen and -grpc-listen override the config's addresses")
	}
}

// printBanner tells on stdout what serve runs: the built-in example when
// configPath is "", where each listener is and what it serves, the rules
// in force, and for the built-in example a command to try it.
func printBanner(stdout io.Writer, cfg *config.Config, a daemon.Addrs, configPath string) {
	if configPath == "" {
		fmt.Fprintln(stdout, "sluice: no -config given: running the built-in example (memory store); `sluice serve -config FILE` to use your own")
	}
	deferred := "" // served where the deferral queue is: on Redis
	if cfg.Store.Type == config.StoreRedis {
		deferred = ", GET /v1/deferred/ID"
	}
	fmt.Fprintf(stdout, "sluice: decision API on %s (POST /v1/check, POST /v1/report, /v1/forward-auth, GET /v1/rules, GET /v1/hotkeys%s, /metrics, /healthz, /readyz)\n", listenerURL(a.API, cfg.API.TLS), deferred)
	if a.Proxy != "" {
		fmt.Fprintf(stdout, "sluice: proxy on %s → %s\n", listenerURL(a.Proxy, cfg.Proxy.TLS), cfg.Proxy.Upstream)
	}
	if a.GRPC != "" {
		fmt.Fprintf(stdout, "sluice: Envoy rate limit service (gRPC) on %s (POST /json on the decision API)\n", a.GRPC)
	}
	if set, err := cfg.RuleSet(); err == nil {
		printRules(stdout, set, a.GRPC != "")
		if configPath == "" && set.Rule("demo-per-ip") != nil {
			target := "http://" + a.API
			if path, unix := config.UnixPath(a.API); unix {
				target = "--unix-socket " + path + " http://sluice"
			}
			fmt.Fprintf(stdout, "sluice: try it: curl -s -X POST %s/v1/check -d '{\"rule\":\"demo-per-ip\",\"key\":\"203.0.113.7\"}'\n", target)
		}
	}
}

// listenerURL is a listener's address as a URL (a Unix socket's as
// unix:/PATH); t is its TLS config, nil for plain HTTP.
func listenerURL(addr string, t *config.TLSConfig) string {
	if _, unix := config.UnixPath(addr); unix {
		return addr
	}
	if t != nil {
		return "https://" + addr
	}
	return "http://" + addr
}

// reloadOnHUP handles the SIGHUPs on hup until ran is closed: each reloads
// d's config file, except during the shutdown (ctx done, or d refusing)
// and for the built-in example (configPath ""), which are told and
// ignored. Reload logs and counts its outcome itself.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, ran <-chan struct{}, d *daemon.Daemon, logger *slog.Logger, configPath string) {
	for {
		select {
		case <-ran:
			return
		case <-hup:
		}
		switch {
		case ctx.Err() != nil:
			logger.Info("SIGHUP during the shutdown: not reloading")
		case configPath == "":
			logger.Warn("SIGHUP: nothing to reload (running the built-in example)")
		default:
			if errors.Is(d.Reload(), daemon.ErrShuttingDown) {
				logger.Info("SIGHUP during the shutdown: not reloading")
			}
		}
	}
}

// maxPrintedRules bounds the rules serve lists at startup.
const maxPrintedRules = 10

// printRules lists the rules in force, one line each: name, limit, key,
// match, algorithm and action. envoy says the Envoy service runs, limiting
// by its descriptor files whatever the rules.
func printRules(w io.Writer, set *rules.Set, envoy bool) {
	if len(set.Rules) == 0 {
		if envoy {
			fmt.Fprintln(w, "sluice: no rules: only the Envoy service (gRPC and POST /json) limits, by its descriptor files; add rules: to limit the proxy, /v1/check and /v1/forward-auth")
		} else {
			fmt.Fprintln(w, "sluice: no rules: every request passes (add rules: to the config)")
		}
		return
	}
	for i, r := range set.Rules {
		if i == maxPrintedRules {
			fmt.Fprintf(w, "sluice: … and %d more rules (GET /v1/rules lists them all)\n", len(set.Rules)-i)
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "sluice: rule %s: %s", r.Name, r.Limit)
		if r.Limit.Burst != r.Limit.Rate {
			fmt.Fprintf(&b, " (burst %d)", r.Limit.Burst)
		}
		b.WriteString(" per ")
		for j, p := range r.Key {
			if j > 0 {
				b.WriteString("+")
			}
			b.WriteString(p.String())
		}
		if len(r.Methods) > 0 || r.Path != "" {
			on := append([]string(nil), r.Methods...)
			if r.Path != "" {
				on = append(on, r.Path)
			}
			b.WriteString(" on ")
			b.WriteString(strings.Join(on, " "))
			if r.Fold && r.Path != "" {
				b.WriteString(" (any case)")
			}
		}
		fmt.Fprintf(&b, ", %s, %s", r.Algorithm, r.Action)
		fmt.Fprintln(w, b.String())
	}
}
