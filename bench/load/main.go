// Command load is the daemon's load run: in one bounded run on loopback it
// measures requests/s, latency and the server CPU per request (read from
// /proc/PID/stat) straight to a trivial upstream; through peers proxying
// to it — nginx proxy_pass with a limit_req on every request, Caddy
// reverse_proxy, a bare httputil.ReverseProxy and a minimal proxy on
// github.com/valyala/fasthttp (the last three without limiting: the cost
// of proxying itself); through `sluice serve` as a reverse proxy with one
// rule on every request, on the memory store and on Redis; and /v1/check
// decisions/s against a bare net/http handler that decodes and encodes the
// same JSON. It prints a Markdown report with the ratios to nginx.
//
//	cd bench && go run ./load           # defaults: wrk -t1 -c64, 10s per step
//	cd bench && go run ./load -d 5s -c 32 -runs 3
//	cd bench && go run ./load -proxy-only   # the proxy rows only
//
// Needs wrk, redis-server, nginx and caddy on PATH (Linux only: /proc).
// Peak throughput comes from wrk (closed loop, -c connections); the
// latency "at half of peak" from harness.Paced, open loop at half the
// proxy's peak rate (latency from each request's intended send time; the
// run fails after its report if a paced step got less than 97 % of the
// rate), once straight to the upstream and once through the proxy. With -runs N the steps run N times interleaved and
// each keeps its best run.
//
// The same binary also runs the helper servers as child processes:
// `load upstream ADDR`, `load bare ADDR`, `load rproxy ADDR UPSTREAM` and
// `load fastproxy ADDR UPSTREAM`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	if len(os.Args) >= 3 {
		switch os.Args[1] {
		case "upstream":
			serveUpstream(os.Args[2])
			return
		case "bare":
			serveBare(os.Args[2])
			return
		case "rproxy":
			if len(os.Args) >= 4 {
				serveReverseProxy(os.Args[2], os.Args[3])
				return
			}
		case "fastproxy":
			if len(os.Args) >= 4 {
				serveFastProxy(os.Args[2], os.Args[3])
				return
			}
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

type options struct {
	duration  time.Duration
	threads   int
	conns     int
	runs      int
	keep      bool
	proxyOnly bool // -proxy-only: no /v1/check steps
}

// The steps' positions in the report.
const (
	stepNginx  = 1
	stepCaddy  = 2
	stepBare   = 3
	stepFast   = 4
	stepSluice = 5 // memory store; 6 is the redis store
	stepCheck  = 7 // the bare JSON handler; 8 and 9 /v1/check
	stepCount  = 10
)

func run() error {
	var o options
	flag.DurationVar(&o.duration, "d", 10*time.Second, "duration of each measured step")
	flag.IntVar(&o.threads, "t", 1, "wrk threads")
	flag.IntVar(&o.conns, "c", 64, "wrk connections")
	flag.IntVar(&o.runs, "runs", 1, "wrk runs per step; the report keeps each step's best (on a shared machine, other load only ever slows a run down)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	flag.BoolVar(&o.proxyOnly, "proxy-only", false, "run the proxy steps only (no /v1/check steps)")
	flag.Parse()
	if o.duration <= 0 || o.duration > 2*time.Minute {
		return errors.New("-d must be in (0, 2m]")
	}
	if o.runs < 1 || o.runs > 5 {
		return errors.New("-runs must be in [1, 5]")
	}
	for _, bin := range []string{"wrk", "redis-server", "go", "nginx", "caddy"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found on PATH: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-load-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Build sluice once and run it as a process, as users do.
	sluice, err := harness.BuildSluice(ctx, dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var procs harness.Procs
	defer procs.StopAll()

	ports, err := harness.FreePorts(11)
	if err != nil {
		return err
	}
	upAddr, bareAddr, redisAddr := ports[0], ports[1], ports[2]
	memAPI, memProxy, redisAPI, redisProxy := ports[3], ports[4], ports[5], ports[6]
	rpAddr, nginxAddr, caddyAddr, fastAddr := ports[7], ports[8], ports[9], ports[10]

	up, err := procs.Start(ctx, "upstream", self, "upstream", upAddr)
	if err != nil {
		return err
	}
	bare, err := procs.Start(ctx, "bare", self, "bare", bareAddr)
	if err != nil {
		return err
	}
	rp, err := procs.Start(ctx, "rproxy", self, "rproxy", rpAddr, "http://"+upAddr)
	if err != nil {
		return err
	}
	fast, err := procs.Start(ctx, "fastproxy", self, "fastproxy", fastAddr, "http://"+upAddr)
	if err != nil {
		return err
	}
	ngx, err := startNginx(ctx, &procs, filepath.Join(dir, "nginx"), nginxAddr, upAddr)
	if err != nil {
		return err
	}
	caddy, err := startCaddy(ctx, &procs, dir, caddyAddr, upAddr)
	if err != nil {
		return err
	}
	redis, err := procs.StartRedis(ctx, redisAddr, dir)
	if err != nil {
		return err
	}
	for _, a := range []string{upAddr, bareAddr, rpAddr, fastAddr, nginxAddr, caddyAddr} {
		if err := harness.WaitTCP(ctx, a); err != nil {
			return err
		}
	}
	memCfg := filepath.Join(dir, "memory.yaml")
	redisCfg := filepath.Join(dir, "redis.yaml")
	if err := os.WriteFile(memCfg, sluiceConfig(memAPI, memProxy, upAddr, ""), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(redisCfg, sluiceConfig(redisAPI, redisProxy, upAddr, redisAddr), 0o644); err != nil {
		return err
	}
	mem, err := procs.Start(ctx, "sluice-memory", sluice, "serve", "-config", memCfg)
	if err != nil {
		return err
	}
	red, err := procs.Start(ctx, "sluice-redis", sluice, "serve", "-config", redisCfg)
	if err != nil {
		return err
	}
	for _, a := range []string{memAPI, memProxy, redisAPI, redisProxy} {
		if err := harness.WaitTCP(ctx, a); err != nil {
			return err
		}
	}
	luaCheck := filepath.Join(dir, "check.lua")
	if err := os.WriteFile(luaCheck, []byte(checkLua), 0o644); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "load: %d wrk steps, 2 paced steps and 3 single-connection steps of %v (wrk -t%d -c%d)\n", stepCount, o.duration, o.threads, o.conns)
	steps := []struct {
		name   string
		url    string
		script string
		server *harness.Proc
		redis  *harness.Proc // the Redis the server uses, nil if none
	}{
		{"direct to upstream", "http://" + upAddr + "/", "", up, nil},
		{"nginx proxy_pass with limit_req", "http://" + nginxAddr + "/", "", ngx, nil},
		{"Caddy reverse_proxy (no limiting)", "http://" + caddyAddr + "/", "", caddy, nil},
		{"bare httputil.ReverseProxy (no limiting)", "http://" + rpAddr + "/", "", rp, nil},
		{"minimal fasthttp proxy (no limiting)", "http://" + fastAddr + "/", "", fast, nil},
		{"sluice proxy, memory store", "http://" + memProxy + "/", "", mem, nil},
		{"sluice proxy, redis store", "http://" + redisProxy + "/", "", red, redis},
		{"bare net/http JSON handler", "http://" + bareAddr + "/v1/check", luaCheck, bare, nil},
		{"sluice /v1/check, memory store", "http://" + memAPI + "/v1/check", luaCheck, mem, nil},
		{"sluice /v1/check, redis store", "http://" + redisAPI + "/v1/check", luaCheck, red, redis},
	}
	loadBefore := harness.LoadAvg()
	results := make([]result, len(steps))
	for run := range o.runs {
		for i, s := range steps {
			if o.proxyOnly && i >= stepCheck {
				break
			}
			fmt.Fprintf(os.Stderr, "load: %s (run %d of %d) …\n", s.name, run+1, o.runs)
			r, err := wrk(ctx, o, s.url, s.script, s.server, s.redis)
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", s.name, err, s.server.Logs)
			}
			r.name = s.name
			if r.rps > results[i].rps {
				results[i] = r
			}
		}
	}

	// Latency at half of the proxy's peak, paced, same rate for both.
	rate := results[stepSluice].rps / 2
	fmt.Fprintf(os.Stderr, "load: paced at %.0f req/s …\n", rate)
	var short error // a paced step short of its rate: reported, then the run fails
	directHalf, err := paced(ctx, o, upAddr, rate, up)
	if errors.Is(err, harness.ErrShortfall) {
		short, err = err, nil
	}
	if err != nil {
		return err
	}
	proxyHalf, err := paced(ctx, o, memProxy, rate, mem)
	if errors.Is(err, harness.ErrShortfall) {
		short, err = errors.Join(short, err), nil
	}
	if err != nil {
		return err
	}
	// One connection, one request at a time: the latency a proxy hop
	// adds with no queueing at all.
	one := o
	one.conns, one.threads = 1, 1
	var single [3]result
	for i, s := range []struct {
		url    string
		server *harness.Proc
	}{{"http://" + upAddr + "/", up}, {"http://" + memProxy + "/", mem}, {"http://" + rpAddr + "/", rp}} {
		fmt.Fprintf(os.Stderr, "load: one connection to %s …\n", s.url)
		if single[i], err = wrk(ctx, one, s.url, "", s.server, nil); err != nil {
			return err
		}
	}
	report(os.Stdout, o, results, rate, directHalf, proxyHalf, loadBefore, harness.LoadAvg())
	if short != nil {
		return fmt.Errorf("a paced step fell short of its rate, its latencies are not at half of peak: %w", short)
	}
	fmt.Fprintf(os.Stdout, "- one connection, one request at a time (p50 / p99): direct %v / %v; sluice proxy %v / %v; bare httputil.ReverseProxy %v / %v\n",
		single[0].p50, single[0].p99, single[1].p50, single[1].p99, single[2].p50, single[2].p99)
	return nil
}
