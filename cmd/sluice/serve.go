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
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config `file` (default: a built-in example on the memory store)")
	var over config.Overrides
	fs.StringVar(&over.Listen, "listen", "", "decision API `address` (host:port, or unix:/PATH for a Unix socket), overriding the config's listen; port 0 picks a free port")
	fs.StringVar(&over.ProxyListen, "proxy-listen", "", "reverse proxy `address`, overriding proxy.listen; port 0 picks a free port")
	fs.StringVar(&over.GRPCListen, "grpc-listen", "", "gRPC service `address` (host:port, or unix:/PATH), overriding grpc.listen; port 0 picks a free port")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice serve [-config FILE] [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}

	var (
		cfg *config.Config
		err error
	)
	if *configPath == "" {
		cfg, err = config.Parse(builtinName, config.Example())
	} else {
		cfg, err = config.Load(*configPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: invalid config:\n%v\n", err)
		return 1
	}
	if err := over.Apply(cfg); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}

	level := new(slog.LevelVar)
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil && cfg.LogLevel != "" {
		fmt.Fprintf(stderr, "sluice serve: log_level: %v\n", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if ctx.Err() != nil {
		logger.Info("stopped during startup: nothing served")
		return 0
	}
	// ctx stops the startup too: a SIGINT or SIGTERM while New dials a
	// Redis that does not answer ends it at once, not after
	// store.redis.timeout.
	d, err := daemon.NewContext(ctx, cfg, daemon.Options{Logger: logger, Registry: reg, ConfigPath: *configPath, Overrides: over})
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		logger.Info("stopped during startup: nothing served")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		if errors.Is(err, syscall.EADDRINUSE) {
			switch {
			case *configPath == "" && over.Listen != "":
				// The built-in example has one listener, and the user chose its address.
				fmt.Fprintf(stderr, "sluice serve: the -listen address %s is in use (is another sluice running?); "+
					"pick another (-listen 127.0.0.1:0 for any free port)\n", over.Listen)
			case *configPath == "":
				fmt.Fprintln(stderr, "sluice serve: the built-in example's port is busy (is another sluice running?); "+
					"free it, or pick another with -listen ADDR (-listen 127.0.0.1:0 for any free port)")
			default:
				fmt.Fprintln(stderr, "sluice serve: a listen address is in use (is another sluice running?); "+
					"-listen, -proxy-listen and -grpc-listen override the config's addresses")
			}
		}
		return 1
	}
	if ctx.Err() != nil {
		// SIGINT or SIGTERM once New had connected: the listeners are
		// bound but have served nothing, and their addresses were never
		// told.
		err := d.Close()
		logger.Info("stopped during startup: nothing served")
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return 1
		}
		return 0
	}

	floorCtx, stopFloor := context.WithCancel(ctx)
	defer stopFloor()
	go keepHeapFloor(floorCtx, time.Second)

	a := d.Addrs()
	if *configPath == "" {
		fmt.Fprintln(stdout, "sluice: no -config given: running the built-in example (memory store); `sluice serve -config FILE` to use your own")
	}
	// url is a listener's address as a URL (a Unix socket's as unix:/PATH).
	url := func(addr string, t *config.TLSConfig) string {
		if _, unix := config.UnixPath(addr); unix {
			return addr
		}
		if t != nil {
			return "https://" + addr
		}
		return "http://" + addr
	}
	deferred := "" // served where the deferral queue is: on Redis
	if cfg.Store.Type == config.StoreRedis {
		deferred = ", GET /v1/deferred/ID"
	}
	fmt.Fprintf(stdout, "sluice: decision API on %s (POST /v1/check, POST /v1/report, /v1/forward-auth, GET /v1/rules, GET /v1/hotkeys%s, /metrics, /healthz, /readyz)\n", url(a.API, cfg.API.TLS), deferred)
	if a.Proxy != "" {
		fmt.Fprintf(stdout, "sluice: proxy on %s → %s\n", url(a.Proxy, cfg.Proxy.TLS), cfg.Proxy.Upstream)
	}
	if a.GRPC != "" {
		fmt.Fprintf(stdout, "sluice: Envoy rate limit service (gRPC) on %s (POST /json on the decision API)\n", a.GRPC)
	}
	if set, err := cfg.RuleSet(); err == nil {
		printRules(stdout, set, a.GRPC != "")
		if *configPath == "" && set.Rule("demo-per-ip") != nil {
			target := "http://" + a.API
			if path, unix := config.UnixPath(a.API); unix {
				target = "--unix-socket " + path + " http://sluice"
			}
			fmt.Fprintf(stdout, "sluice: try it: curl -s -X POST %s/v1/check -d '{\"rule\":\"demo-per-ip\",\"key\":\"203.0.113.7\"}'\n", target)
		}
	}

	// SIGHUPs are handled until Run has returned: one during the
	// shutdown is told and ignored (the daemon refuses to reload then:
	// the requests in flight finish under the config they began with).
	ran, hupDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hupDone)
		for {
			select {
			case <-ran:
				return
			case <-hup:
			}
			switch {
			case ctx.Err() != nil:
				logger.Info("SIGHUP during the shutdown: not reloading")
			case *configPath == "":
				logger.Warn("SIGHUP: nothing to reload (running the built-in example)")
			default:
				// Reload logs and counts the outcome itself.
				if errors.Is(d.Reload(), daemon.ErrShuttingDown) {
					logger.Info("SIGHUP during the shutdown: not reloading")
				}
			}
		}
	}()

	err = d.Run(ctx)
	close(ran)
	<-hupDone
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	return 0
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
