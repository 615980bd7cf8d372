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
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/sluicehq/sluice/internal/server"
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

// bare answers every request OK at once.
type bare struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (bare) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// serveBare runs the floor: grpc-go with its defaults, or with workers the
// server options Sluice adds for speed (its stream workers, its codec for
// Envoy's messages and fixed flow-control windows), so that a reader sees
// both ratios.
func serveBare(addr string, workers bool) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var opts []grpc.ServerOption
	if workers {
		opts = server.FastServerOptions()
	}
	s := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s, bare{})
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
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

const descriptors = `domain: bench
descriptors:
  - key: key
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

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

type row struct {
	target        string
	client        string // the load generator's client: lean or proto
	conc, keys    int
	n, errs       int64
	rate          float64
	p50, p99      time.Duration
	cpu           time.Duration // server CPU per decision
	clientCPU     time.Duration // the load generator's CPU per call
	redisCPU      time.Duration // Redis' CPU per decision; -1 when no Redis
	redisCmds     float64       // Redis commands per decision, those run by scripts included; -1 when no Redis
	redisCalls    float64       // script calls (round trips) per decision; -1 when no Redis
	overallOK     int64
	floorCPURatio float64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// measure runs one cell: c workers over o.conns connections for
// o.duration, after a short warm-up.
func measure(ctx context.Context, o options, client, addr string, p *harness.Proc, redisAddr string, redisP *harness.Proc, c, keys int) (row, error) {
	conns := make([]*grpc.ClientConn, o.conns)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if client == "lean" {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	}
	for i := range conns {
		cc, err := grpc.NewClient(addr, dial...)
		if err != nil {
			return row{}, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	raws, err := encodeRequests(names)
	if err != nil {
		return row{}, err
	}
	// call makes one call; wctx is the worker's context, whose deadline
	// is the end of the phase plus 10 s.
	call := func(wctx context.Context, cc *grpc.ClientConn, cl rlsv3.RateLimitServiceClient, rnd *rand.Rand) (bool, error) {
		i := rnd.IntN(keys)
		if client == "lean" {
			var rep codeReply
			if err := cc.Invoke(wctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &raws[i], &rep); err != nil {
				return false, err
			}
			return rep.code == rlsv3.RateLimitResponse_OK, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cl.ShouldRateLimit(cctx, request(names[i]))
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
	phase := func(d time.Duration, record bool) (row, error) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			lats  []time.Duration
			r     row
			first error
		)
		stop := time.Now().Add(d)
		for w := range c {
			wg.Go(func() {
				cc := conns[w%len(conns)]
				cl := rlsv3.NewRateLimitServiceClient(cc)
				wctx, cancel := context.WithDeadline(ctx, stop.Add(10*time.Second))
				defer cancel()
				rnd := rand.New(rand.NewPCG(uint64(w), 42))
				local := make([]time.Duration, 0, 4096)
				var n, errs, ok int64
				var err1 error
				for time.Now().Before(stop) {
					t0 := time.Now()
					good, err := call(wctx, cc, cl, rnd)
					local = append(local, time.Since(t0))
					n++
					if err != nil {
						errs++
						if err1 == nil {
							err1 = err
						}
					} else if good {
						ok++
					}
				}
				mu.Lock()
				lats = append(lats, local...)
				r.n += n
				r.errs += errs
				r.overallOK += ok
				if first == nil {
					first = err1
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		if !record {
			return r, nil
		}
		if r.errs > 0 {
			return r, fmt.Errorf("%d of %d calls failed, first: %w", r.errs, r.n, first)
		}
		slices.Sort(lats)
		r.p50 = lats[len(lats)/2]
		r.p99 = lats[len(lats)*99/100]
		return r, nil
	}
	if _, err := phase(min(time.Second, o.duration/2), false); err != nil {
		return row{}, err
	}
	cpu0, err := harness.CPUTime(p.Cmd.Process.Pid)
	if err != nil {
		return row{}, err
	}
	var rcpu0 time.Duration
	if redisP != nil {
		if rcpu0, err = harness.CPUTime(redisP.Cmd.Process.Pid); err != nil {
			return row{}, err
		}
	}
	self0 := selfCPU()
	var calls0, cmds0 int64
	if redisAddr != "" {
		if calls0, cmds0, err = harness.RedisCalls(redisAddr); err != nil {
			return row{}, err
		}
	}
	t0 := time.Now()
	r, err := phase(o.duration, true)
	elapsed := time.Since(t0)
	self1 := selfCPU()
	if err != nil {
		return r, err
	}
	cpu1, err := harness.CPUTime(p.Cmd.Process.Pid)
	if err != nil {
		return row{}, err
	}
	r.conc, r.keys = c, keys
	r.rate = float64(r.n) / elapsed.Seconds()
	r.cpu = (cpu1 - cpu0) / time.Duration(r.n)
	r.clientCPU = (self1 - self0) / time.Duration(r.n)
	r.redisCmds, r.redisCalls, r.redisCPU = -1, -1, -1
	if redisP != nil {
		rcpu1, err := harness.CPUTime(redisP.Cmd.Process.Pid)
		if err != nil {
			return row{}, err
		}
		r.redisCPU = (rcpu1 - rcpu0) / time.Duration(r.n)
	}
	if redisAddr != "" {
		calls1, cmds1, err := harness.RedisCalls(redisAddr)
		if err != nil {
			return row{}, err
		}
		r.redisCalls = float64(calls1-calls0) / float64(r.n)
		r.redisCmds = float64(cmds1-cmds0-2) / float64(r.n) // -2: our own INFO calls
	}
	if r.overallOK != r.n {
		return r, fmt.Errorf("%d of %d answers were not OK: the limit should admit everything", r.n-r.overallOK, r.n)
	}
	return r, nil
}

// startReference runs Envoy's reference service on the descriptor file,
// configured (by environment, as it is) for the local Redis over TCP,
// without statsd, with its defaults otherwise.
func startReference(ctx context.Context, procs *harness.Procs, bin, dir, redisAddr, httpAddr, grpcAddr, debugAddr string) (*harness.Proc, error) {
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(descriptors), 0o644); err != nil {
		return nil, err
	}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	p := &harness.Proc{Name: "reference", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, bin)}
	p.Cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+port(httpAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(debugAddr),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the reference service: %w", err)
	}
	procs.Add(p)
	return p, nil
}

func report(o options, rows []row) {
	fmt.Printf("\n%d cells of %v each (after a warm-up), %d gRPC connections, the %s client, load average after: %s, %d CPUs shared by client, servers and Redis.\n\n",
		len(rows), o.duration, o.conns, strings.Join(o.clients, " and the "), harness.LoadAvg(), harness.NumCPU())
	// Ratios are taken within one client.
	type cell struct {
		conc, keys int
		client     string
	}
	floor := map[cell]row{}
	ref := map[cell]row{}
	for _, r := range rows {
		if strings.HasPrefix(r.target, "bare grpc-go (floor)") {
			floor[cell{r.conc, r.keys, r.client}] = r
		}
		if strings.HasPrefix(r.target, "reference") {
			ref[cell{r.conc, r.keys, r.client}] = r
		}
	}
	fmt.Println("| server | concurrency | keys | decisions/s | ÷ reference | p50 ms | p99 ms | server CPU µs/decision | CPU ÷ floor | Redis CPU µs/decision | client CPU µs/call | Redis script calls/decision | Redis commands/decision |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		ratio := "—"
		if f, ok := floor[cell{r.conc, r.keys, r.client}]; ok && f.cpu > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(r.cpu)/float64(f.cpu))
		}
		vsRef := "—"
		if f, ok := ref[cell{r.conc, r.keys, r.client}]; ok && f.rate > 0 {
			vsRef = fmt.Sprintf("%.2f×", r.rate/f.rate)
		}
		calls, cmds, rcpu := "—", "—", "—"
		if r.redisCmds >= 0 {
			calls, cmds = fmt.Sprintf("%.2f", r.redisCalls), fmt.Sprintf("%.2f", r.redisCmds)
		}
		if r.redisCPU >= 0 {
			rcpu = fmt.Sprintf("%.1f", us(r.redisCPU))
		}
		fmt.Printf("| %s | %d | %d | %.0f | %s | %.2f | %.2f | %.1f | %s | %s | %.1f | %s | %s |\n",
			r.target, r.conc, r.keys, r.rate, vsRef, ms(r.p50), ms(r.p99), us(r.cpu), ratio, rcpu, us(r.clientCPU), calls, cmds)
	}
}
