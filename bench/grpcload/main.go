// Command grpcload is the Envoy rate limit service's load run: in one
// bounded run on loopback it drives
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, as Envoy
// does, against
//
//   - bare: a grpc-go server that answers OK at once (the floor: what gRPC
//     itself costs, with grpc-go's defaults), and the same with the server
//     options Sluice sets for speed (its stream workers, its codec for
//     Envoy's two messages and fixed flow-control windows), so that both
//     ratios can be read,
//   - sluice serve with the memory store,
//   - sluice serve with a local Redis, and the same with GOMAXPROCS=1,
//   - with -reference BIN, Envoy's reference rate limit service
//     (envoyproxy/ratelimit's service_cmd, built by you) on the same Redis,
//
// at several concurrencies and key counts, and prints a Markdown table:
// decisions/s, p50 and p99 latency, server CPU per decision (from
// /proc/PID/stat) and Redis commands per decision (from INFO stats).
//
//	cd bench && go run ./grpcload                      # c=16,64,256; 1 and 10,000 keys; 5s per cell
//	cd bench && go run ./grpcload -d 3s -c 64 -keys 1
//
// Each decision is one request with one descriptor (key, k<i>), i drawn
// uniformly from the key set; the limit (a fixed window of 10^9 a second)
// admits every request, as most of a real gateway's traffic is. Needs
// redis-server on PATH; Linux only (/proc).
//
// The same binary runs the bare server as a child process: `grpcload bare
// ADDR [workers]`. -only TEXT runs only the servers whose name contains
// TEXT, beside the floors (while developing); -variants 'A=1|B=2 C=3' adds
// a row of sluice on Redis per variant, each with that environment (A/B of
// runtime settings, or of a setting read from the environment while
// developing, in one run).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "bare" {
		serveBare(os.Args[2], len(os.Args) == 4 && os.Args[3] == "workers")
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
}

type options struct {
	duration time.Duration
	conc     []int
	keys     []int
	conns    int
	keep     bool
	ref      string
	only     string
	clients  []string
	variants []string
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive whole numbers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run() error {
	var o options
	var conc, keys string
	flag.DurationVar(&o.duration, "d", 5*time.Second, "duration of each measured cell")
	flag.StringVar(&conc, "c", "16,64,256", "concurrencies (requests in flight)")
	flag.StringVar(&keys, "keys", "1,10000", "key counts")
	flag.IntVar(&o.conns, "conns", 4, "gRPC connections the requests are spread over (Envoy opens a few)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	flag.StringVar(&o.ref, "reference", "", "`binary` of Envoy's reference rate limit service (go build ./src/service_cmd in envoyproxy/ratelimit) to run beside Sluice")
	flag.StringVar(&o.only, "only", "", "run only the servers whose name contains this `text` (and the floor), e.g. -only Redis")
	var clients, variants string
	flag.StringVar(&variants, "variants", "", "more rows of sluice on Redis, each with its own `environment` (space-separated NAME=VALUE, variants separated by |, e.g. 'GOGC=200|GOMAXPROCS=1 GOGC=200'): for A/B of runtime settings in one run")
	flag.StringVar(&clients, "client", "lean", "the load generator's client: lean (requests encoded once, one context per worker; see client.go) or proto (grpc-go's generated client, a message and a timeout per call); lean,proto runs every cell with each, for A/B in one run")
	flag.Parse()
	for _, c := range strings.Split(clients, ",") {
		if c != "lean" && c != "proto" {
			return errors.New("-client: lean, proto or both separated by a comma")
		}
		o.clients = append(o.clients, c)
	}
	for _, v := range strings.Split(variants, "|") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		for _, kv := range strings.Fields(v) {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("-variants: %q is not NAME=VALUE", kv)
			}
		}
		o.variants = append(o.variants, v)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400) // the generator's own collector: see client.go
	}
	var err error
	if o.conc, err = ints(conc); err != nil {
		return err
	}
	if o.keys, err = ints(keys); err != nil {
		return err
	}
	if o.duration <= 0 || o.duration > 20*time.Second {
		return errors.New("-d must be in (0, 20s]")
	}
	for _, c := range o.conc {
		if c > 4096 {
			return errors.New("-c: at most 4096")
		}
	}
	dir, err := os.MkdirTemp("", "sluice-grpcload-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	sluice, err := harness.BuildSluice(ctx, dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ports, err := harness.FreePorts(12 + 2*len(o.variants))
	if err != nil {
		return err
	}
	bareAddr, redisAddr, memAPI, memGRPC, redAPI, redGRPC := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	oneAPI, oneGRPC := ports[6], ports[7]
	refHTTP, refGRPC, refDebug := ports[8], ports[9], ports[10]
	var procs harness.Procs
	defer procs.StopAll()
	bareP, err := procs.Start(ctx, "bare", self, "bare", bareAddr)
	if err != nil {
		return err
	}
	bareWAddr := ports[11]
	bareWP, err := procs.Start(ctx, "bare-workers", self, "bare", bareWAddr, "workers")
	if err != nil {
		return err
	}
	redisP, err := procs.StartRedis(ctx, redisAddr, dir)
	if err != nil {
		return err
	}
	desc := filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(desc, []byte(descriptors), 0o644); err != nil {
		return err
	}
	cfg := func(name, api, grpcAddr, store string) (string, error) {
		p := filepath.Join(dir, name+".yaml")
		y := fmt.Sprintf("listen: %s\nlog_level: warn\ngrpc:\n  listen: %s\n  config: [%s]\n%s", api, grpcAddr, desc, store)
		return p, os.WriteFile(p, []byte(y), 0o644)
	}
	memCfg, err := cfg("memory", memAPI, memGRPC, "")
	if err != nil {
		return err
	}
	redCfg, err := cfg("redis", redAPI, redGRPC, "store:\n  type: redis\n  redis: {addrs: ["+redisAddr+"], timeout: 1s}\n")
	if err != nil {
		return err
	}
	memP, err := procs.Start(ctx, "sluice-memory", sluice, "serve", "-config", memCfg)
	if err != nil {
		return err
	}
	redP, err := procs.Start(ctx, "sluice-redis", sluice, "serve", "-config", redCfg)
	if err != nil {
		return err
	}
	// The same daemon on one P (GOMAXPROCS=1): on two cores shared with
	// the client and Redis it spends less CPU per decision (fewer
	// cross-thread wake-ups); shown for readers who run it beside Envoy.
	oneCfg, err := cfg("redis-one", oneAPI, oneGRPC, "store:\n  type: redis\n  redis: {addrs: ["+redisAddr+"], timeout: 1s}\n")
	if err != nil {
		return err
	}
	startEnv := func(name, cfg string, env ...string) (*harness.Proc, error) {
		p := &harness.Proc{Name: name, Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, sluice, "serve", "-config", cfg)}
		p.Cmd.Env = append(os.Environ(), env...)
		p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
		if err := p.Cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		procs.Add(p)
		return p, nil
	}
	oneP, err := startEnv("sluice-redis-one", oneCfg, "GOMAXPROCS=1")
	if err != nil {
		return err
	}
	type target struct {
		name  string
		addr  string
		p     *harness.Proc
		redis string // Redis' address, "" when the server does not use it
	}
	targets := []target{
		{"bare grpc-go (floor)", bareAddr, bareP, ""},
		{"bare grpc-go, Sluice's server options", bareWAddr, bareWP, ""},
		{"sluice, memory", memGRPC, memP, ""},
		{"sluice, Redis", redGRPC, redP, redisAddr},
		{"sluice, Redis, GOMAXPROCS=1", oneGRPC, oneP, redisAddr},
	}
	for i, v := range o.variants {
		api, grpcAddr := ports[12+2*i], ports[13+2*i]
		name := fmt.Sprintf("redis-variant-%d", i)
		c, err := cfg(name, api, grpcAddr, "store:\n  type: redis\n  redis: {addrs: ["+redisAddr+"], timeout: 1s}\n")
		if err != nil {
			return err
		}
		p, err := startEnv("sluice-"+name, c, strings.Fields(v)...)
		if err != nil {
			return err
		}
		targets = append(targets, target{"sluice, Redis, " + v, grpcAddr, p, redisAddr})
	}
	if o.ref != "" {
		p, err := startReference(ctx, &procs, o.ref, dir, redisAddr, refHTTP, refGRPC, refDebug)
		if err != nil {
			return err
		}
		targets = append(targets, target{"reference (envoyproxy/ratelimit), Redis", refGRPC, p, redisAddr})
	}
	if o.only != "" {
		kept := targets[:0]
		for _, tg := range targets {
			if strings.HasPrefix(tg.name, "bare") || strings.Contains(tg.name, o.only) {
				kept = append(kept, tg)
			}
		}
		targets = kept
	}
	for _, tg := range targets {
		if err := harness.WaitTCP(ctx, tg.addr); err != nil {
			return fmt.Errorf("%s: %w\n%s", tg.name, err, tg.p.Logs.String())
		}
	}
	cells := len(targets) * len(o.conc) * len(o.keys)
	fmt.Fprintf(os.Stderr, "grpcload: %d cells of %v, load average %s\n", cells, o.duration, harness.LoadAvg())
	var rows []row
	for _, tg := range targets {
		for _, c := range o.conc {
			for _, k := range o.keys {
				for _, cl := range o.clients { // innermost: an A/B of clients alternates
					rp := redisP
					if tg.redis == "" {
						rp = nil
					}
					r, err := measure(ctx, o, cl, tg.addr, tg.p, tg.redis, rp, c, k)
					if err != nil {
						return fmt.Errorf("%s c=%d keys=%d: %w\n%s", tg.name, c, k, err, tg.p.Logs.String())
					}
					r.target, r.client = tg.name, cl
					if len(o.clients) > 1 {
						r.target += " (" + cl + " client)"
					}
					rows = append(rows, r)
					fmt.Fprintf(os.Stderr, "  %-22s c=%-4d keys=%-6d %9.0f/s p50 %6.2fms p99 %6.2fms cpu %5.1fµs client %5.1fµs redis %5.1fµs calls %.2f cmds %.2f\n",
						r.target, c, k, r.rate, ms(r.p50), ms(r.p99), us(r.cpu), us(r.clientCPU), us(r.redisCPU), r.redisCalls, r.redisCmds)
				}
			}
		}
	}
	report(o, rows)
	return nil
}
