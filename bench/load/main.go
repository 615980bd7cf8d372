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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/valyala/fasthttp"
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

// serveUpstream is the trivial upstream: a fixed small body.
func serveUpstream(addr string) {
	body := []byte("hello from upstream\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, h))
	os.Exit(1)
}

// serveReverseProxy is the baseline for the proxy: net/http's own
// httputil.ReverseProxy with pooled upstream connections, no limiting, so
// the report can tell the cost of proxying from the cost of limiting.
func serveReverseProxy(addr, upstream string) {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, rp))
	os.Exit(1)
}

// serveFastProxy is a minimal proxy on github.com/valyala/fasthttp (no
// limiting, no header rewriting): what a Go proxy on another HTTP engine
// than net/http costs, for comparison.
func serveFastProxy(addr, upstream string) {
	c := &fasthttp.HostClient{Addr: strings.TrimPrefix(upstream, "http://"), MaxConns: 1024}
	h := func(ctx *fasthttp.RequestCtx) {
		if err := c.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		}
	}
	fmt.Fprintln(os.Stderr, fasthttp.ListenAndServe(addr, h))
	os.Exit(1)
}

type checkRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost int64  `json:"cost"`
}

type checkResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// serveBare is the baseline for /v1/check: the same JSON in and out, no
// decision.
func serveBare(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req checkRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(checkResponse{Allowed: true, Limit: 100, Remaining: 99})
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, mux))
	os.Exit(1)
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
	if _, err := procs.StartRedis(ctx, redisAddr, dir); err != nil {
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
	}{
		{"direct to upstream", "http://" + upAddr + "/", "", up},
		{"nginx proxy_pass with limit_req", "http://" + nginxAddr + "/", "", ngx},
		{"Caddy reverse_proxy (no limiting)", "http://" + caddyAddr + "/", "", caddy},
		{"bare httputil.ReverseProxy (no limiting)", "http://" + rpAddr + "/", "", rp},
		{"minimal fasthttp proxy (no limiting)", "http://" + fastAddr + "/", "", fast},
		{"sluice proxy, memory store", "http://" + memProxy + "/", "", mem},
		{"sluice proxy, redis store", "http://" + redisProxy + "/", "", red},
		{"bare net/http JSON handler", "http://" + bareAddr + "/v1/check", luaCheck, bare},
		{"sluice /v1/check, memory store", "http://" + memAPI + "/v1/check", luaCheck, mem},
		{"sluice /v1/check, redis store", "http://" + redisAPI + "/v1/check", luaCheck, red},
	}
	loadBefore := harness.LoadAvg()
	results := make([]result, len(steps))
	for run := range o.runs {
		for i, s := range steps {
			if o.proxyOnly && i >= stepCheck {
				break
			}
			fmt.Fprintf(os.Stderr, "load: %s (run %d of %d) …\n", s.name, run+1, o.runs)
			r, err := wrk(ctx, o, s.url, s.script, s.server)
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
		if single[i], err = wrk(ctx, one, s.url, "", s.server); err != nil {
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

// startNginx runs nginx as one process (master_process off: one worker,
// its CPU in one /proc/PID/stat) proxying addr to upstream over pooled
// HTTP/1.1 connections, with a limit_req zone keyed by client address on
// every request that never limits: nginx's equivalent of the Sluice rule.
func startNginx(ctx context.Context, procs *harness.Procs, dir, addr, upstream string) (*harness.Proc, error) {
	return procs.StartNginx(ctx, dir, `limit_req_zone $binary_remote_addr zone=bench:10m rate=1000000r/s;
upstream up { server `+upstream+`; keepalive 256; }
server {
    listen `+addr+`;
    location / {
        limit_req zone=bench burst=1000000 nodelay;
        proxy_pass http://up;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header X-Forwarded-For $remote_addr;
    }
}
`)
}

// startCaddy runs Caddy's reverse_proxy from addr to upstream. Caddy has
// no rate limiting of its own (it needs a third-party module), so its row
// is proxying alone.
func startCaddy(ctx context.Context, procs *harness.Procs, dir, addr, upstream string) (*harness.Proc, error) {
	conf := "{\n\tadmin off\n\tauto_https off\n}\nhttp://" + addr + " {\n\treverse_proxy " + upstream + "\n}\n"
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p := &harness.Proc{Name: "caddy", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, "caddy", "run", "--config", path, "--adapter", "caddyfile")}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	p.Cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "HOME="+dir)
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start caddy: %w", err)
	}
	procs.Add(p)
	return p, nil
}

// sluiceConfig is a config with one rule that applies to every request but
// never limits (so every request does a full decision and is forwarded),
// and a named rule for /v1/check.
func sluiceConfig(api, proxy, upstream, redis string) []byte {
	store := "  type: memory\n"
	if redis != "" {
		// A generous timeout: this measures throughput, not the fallback.
		store = fmt.Sprintf("  type: redis\n  redis:\n    addrs: [%s]\n    timeout: 1s\n", redis)
	}
	return fmt.Appendf(nil, `listen: %s
proxy:
  listen: %s
  upstream: http://%s
store:
%s  on_error: deny
rules:
  - name: bench
    key: [ip]
    rate: 100000000/s
    algorithm: token_bucket
    action: reject
`, api, proxy, upstream, store)
}

// checkLua makes wrk POST /v1/check over 1,000 keys, preformatted in init
// so the generator spends no time building requests.
const checkLua = `
local reqs = {}
local n = 0
init = function(args)
  for i = 1, 1000 do
    local body = '{"rule":"bench","key":"user-' .. i .. '","cost":1}'
    reqs[i] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
  end
end
request = function()
  n = n % 1000 + 1
  return reqs[n]
end
`

type result struct {
	name          string
	rps           float64
	requests      int64
	p50, p99      time.Duration
	non2xx        int64
	cpuPerRequest time.Duration // server CPU (utime+stime) per request
}

// wrk runs one closed-loop step and reads the server's CPU time around it.
func wrk(ctx context.Context, o options, url, script string, server *harness.Proc) (result, error) {
	w, err := harness.Wrk(ctx, o.threads, o.conns, o.duration, url, script, server)
	return fromWrk(w), err
}

// paced sends GET / to addr open loop at rate requests/s (harness.Paced).
func paced(ctx context.Context, o options, addr string, rate float64, server *harness.Proc) (result, error) {
	p, err := harness.Paced(ctx, harness.PacedOptions{Addr: addr, Request: harness.GetRequest(addr, "/"), Rate: rate, Duration: o.duration}, server)
	if err != nil && !errors.Is(err, harness.ErrShortfall) {
		return result{}, err
	}
	if p.Errors > 0 {
		return result{}, fmt.Errorf("%s: %d of %d paced requests failed: %v", addr, p.Errors, p.Sent, p.FirstErr)
	}
	return result{rps: p.Achieved, requests: p.Answered, p50: p.P50, p99: p.P99, non2xx: p.Non2xx, cpuPerRequest: p.ServerCPU[0]}, err
}

func fromWrk(w harness.WrkResult) result {
	r := result{rps: w.RPS, requests: w.Requests, p50: w.P50, p99: w.P99, non2xx: w.Non2xx}
	if len(w.CPUPerRequest) > 0 {
		r.cpuPerRequest = w.CPUPerRequest[0]
	}
	return r
}

func report(w io.Writer, o options, rs []result, rate float64, direct, proxy result, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "Load run %s, %d cores, wrk -t%d -c%d, %v per step, best of %d run(s) per step, everything on one machine over loopback.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), harness.NumCPU(), o.threads, o.conns, o.duration, o.runs)
	fmt.Fprintf(w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", loadBefore, loadAfter)
	fmt.Fprintln(w, "| step | requests/s | p50 | p99 | non-2xx | server CPU/request |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for i, r := range rs {
		if o.proxyOnly && i >= stepCheck {
			break
		}
		fmt.Fprintf(w, "| %s | %.0f | %v | %v | %d | %.1f µs |\n", r.name, r.rps, r.p50, r.p99, r.non2xx,
			float64(r.cpuPerRequest)/float64(time.Microsecond))
	}
	fmt.Fprintln(w)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	sl, ngx := rs[stepSluice], rs[stepNginx]
	fmt.Fprintf(w, "- sluice proxy (memory store, one rule on every request) against nginx proxy_pass with limit_req: %.2f× its requests/s (target ≥ 0.9×), %.2f× its CPU per request (target ≤ 2×)\n",
		sl.rps/ngx.rps, us(sl.cpuPerRequest)/us(ngx.cpuPerRequest))
	fmt.Fprintf(w, "- sluice proxy against Caddy: %.2f× its requests/s; against a bare httputil.ReverseProxy: %.2f×, at %.2f× its CPU per request; against a minimal fasthttp proxy: %.2f×, at %.2f× its CPU per request\n",
		sl.rps/rs[stepCaddy].rps, sl.rps/rs[stepBare].rps, us(sl.cpuPerRequest)/us(rs[stepBare].cpuPerRequest),
		sl.rps/rs[stepFast].rps, us(sl.cpuPerRequest)/us(rs[stepFast].cpuPerRequest))
	fmt.Fprintf(w, "- proxy, memory store: %.0f%% of direct throughput; redis store: %.0f%%\n", 100*sl.rps/rs[0].rps, 100*rs[stepSluice+1].rps/rs[0].rps)
	if !o.proxyOnly {
		fmt.Fprintf(w, "- /v1/check, memory store: %.0f%% of the bare handler (target ≥ 70%%), %.1f µs server CPU per decision (target ≤ 25 µs) vs %.1f µs for the bare handler\n",
			100*rs[stepCheck+1].rps/rs[stepCheck].rps, us(rs[stepCheck+1].cpuPerRequest), us(rs[stepCheck].cpuPerRequest))
		fmt.Fprintf(w, "- /v1/check, redis store: %.0f%% of the bare handler\n", 100*rs[stepCheck+2].rps/rs[stepCheck].rps)
	}
	fmt.Fprintf(w, "- paced at half the proxy's peak (%.0f req/s asked; got %.0f direct, %.0f through the proxy): direct p50 %v p99 %v; proxy p50 %v p99 %v (%d non-2xx); the proxy adds %v at p99 (target < 1ms)\n",
		rate, direct.rps, proxy.rps, direct.p50, direct.p99, proxy.p50, proxy.p99, proxy.non2xx, proxy.p99-direct.p99)
}
