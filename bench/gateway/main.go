// Command gateway measures what asking Sluice costs nginx: in one bounded
// run on loopback, wrk against nginx proxying to a trivial upstream, with
// and without the auth_request to Sluice of examples/gateways/nginx. Both
// nginx configs are the example's, the second with its auth_request line
// turned off, so the difference is the question to Sluice and nothing
// else. It prints a Markdown report: requests/s (closed loop, wrk), the
// latency paced at half of the with-Sluice peak and at a quarter of it
// (open loop, the same rate for both configs, harness.Paced) and on a
// single connection (wrk, no queueing), and the CPU per request of nginx
// and of Sluice, read from /proc/PID/stat. About 3 minutes with the
// defaults.
//
//	cd bench && go run ./gateway                 # wrk -t1 -c64, 10s per step, best of 2
//	cd bench && go run ./gateway -d 5s -runs 1
//
// The paced steps are open loop: requests due at a constant rate, each
// timed from when it was due, so that queueing anywhere (in nginx, in
// Sluice, in the generator waiting for a connection) shows in the
// latency; the run fails, after printing its report, if a paced step got
// less than 97 % of the rate asked. wrk's own pacing (a per-connection
// delay) cannot do this: it fell 18 % short and fired its connections in
// bursts (BENCHMARKS.md). Per paced step the report also says where a
// tail can come from on 2 shared cores: the machine's CPU pressure (PSI),
// each process's run-queue wait per request (schedstat) and Sluice's
// garbage collections (GODEBUG=gctrace=1 in its log).
//
// Needs nginx, wrk and go on PATH (Linux only: /proc, timerfd). nginx
// runs as one process (master_process off) so that its CPU time is one
// PID's; Sluice is the sluice binary built from this repository, with the
// memory store and limits high enough that every request is allowed (the
// cost measured is the decision, not a refusal). The upstream is a second
// nginx process answering a fixed body (-upstream nginx, the default), or
// this program again as a net/http server (-upstream go, `gateway
// upstream ADDR`), in its own process either way, so that this one's CPU
// is the paced generator's alone. nginx by default because on 2 shared
// cores the upstream's CPU is taken from the processes measured, and the
// Go one cost two to three times nginx's per request (startUpstream).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

type options struct {
	duration time.Duration
	threads  int
	conns    int
	runs     int
	procs    int    // Sluice's GOMAXPROCS, 0 for Go's default
	upstream string // "nginx" or "go"
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "upstream" {
		serveUpstream(os.Args[2])
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	flag.DurationVar(&o.duration, "d", 10*time.Second, "duration of each measured step (at most 20s)")
	flag.IntVar(&o.threads, "t", 1, "wrk threads")
	flag.IntVar(&o.conns, "c", 64, "wrk connections")
	flag.IntVar(&o.runs, "runs", 2, "closed-loop runs per config, interleaved; the report keeps each config's best (other load on a shared machine only ever slows a run down)")
	flag.IntVar(&o.procs, "sluice-gomaxprocs", 0, "run Sluice with GOMAXPROCS set to this (0: Go's default, one per core)")
	flag.StringVar(&o.upstream, "upstream", "nginx", "the trivial upstream: nginx (a second nginx process answering a fixed body) or go (a net/http server, this program run again)")
	flag.Parse()
	if o.duration <= 0 || o.duration > 20*time.Second || o.runs < 1 || o.runs > 5 {
		return errors.New("-d must be in (0, 20s] and -runs in 1..5")
	}
	if o.upstream != "nginx" && o.upstream != "go" {
		return errors.New("-upstream must be nginx or go")
	}
	for _, bin := range []string{"nginx", "wrk", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found on PATH", bin)
		}
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-gateway-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	fmt.Fprintln(os.Stderr, "gateway: building sluice")
	sluiceBin, err := harness.BuildSluice(ctx, dir)
	if err != nil {
		return err
	}

	ports, err := harness.FreePorts(4)
	if err != nil {
		return err
	}
	upstreamAddr, sluiceAddr, withAddr, withoutAddr := ports[0], ports[1], ports[2], ports[3]

	var procs harness.Procs
	defer procs.StopAll()

	up, err := startUpstream(ctx, &procs, o.upstream, dir, upstreamAddr)
	if err != nil {
		return err
	}

	// Sluice, on the example's config with limits nobody reaches.
	yaml, err := os.ReadFile(filepath.Join(root, "examples", "gateways", "nginx", "sluice.yaml"))
	if err != nil {
		return err
	}
	y, err := replaceAll(string(yaml), "listen: 127.0.0.1:8080", "listen: "+sluiceAddr,
		"rate: 100/m", "rate: 1000000000/s", "rate: 5/m", "rate: 1000000000/s")
	if err != nil {
		return err
	}
	y += "log_level: warn\n"
	sluiceConf := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(sluiceConf, []byte(y), 0o644); err != nil {
		return err
	}
	// Its output goes to a file, with the Go runtime's line per garbage
	// collection (GODEBUG=gctrace=1): the report counts them per step.
	sluiceLog := filepath.Join(dir, "sluice.log")
	logFile, err := os.Create(sluiceLog)
	if err != nil {
		return err
	}
	defer logFile.Close()
	sluice := &harness.Proc{Name: "sluice", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, sluiceBin, "serve", "-config", sluiceConf)}
	sluice.Cmd.Stdout, sluice.Cmd.Stderr = logFile, logFile
	sluice.Cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	if o.procs > 0 {
		sluice.Cmd.Env = append(sluice.Cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", o.procs))
	}
	if err := sluice.Cmd.Start(); err != nil {
		return fmt.Errorf("start sluice: %w", err)
	}
	procs.Add(sluice)
	if err := harness.WaitListen(ctx, sluiceAddr, sluice); err != nil {
		b, _ := os.ReadFile(sluiceLog)
		return fmt.Errorf("%w\n%s", err, b)
	}
	gcs := func() int { // Sluice's garbage collections so far
		b, _ := os.ReadFile(sluiceLog)
		return bytes.Count(b, []byte("\ngc ")) + bytes.Count(b[:min(len(b), 3)], []byte("gc "))
	}

	// nginx, with and without the auth_request.
	snippet, err := os.ReadFile(filepath.Join(root, "examples", "gateways", "nginx", "sluice.conf"))
	if err != nil {
		return err
	}
	start := func(name, listen string, auth bool) (*harness.Proc, error) {
		conf, err := replaceAll(string(snippet),
			"server 127.0.0.1:8080;", "server "+sluiceAddr+";",
			"server 127.0.0.1:9000;", "server "+upstreamAddr+";",
			"listen 8000;", "listen "+listen+";")
		if err != nil {
			return nil, err
		}
		if !auth {
			if conf, err = replaceAll(conf, "auth_request /_sluice;", "auth_request off;"); err != nil {
				return nil, err
			}
		}
		p, err := procs.StartNginx(ctx, filepath.Join(dir, name), conf)
		if err != nil {
			return nil, err
		}
		return p, harness.WaitListen(ctx, listen, p)
	}
	without, err := start("without", withoutAddr, false)
	if err != nil {
		return err
	}
	with, err := start("with", withAddr, true)
	if err != nil {
		return err
	}

	// A request through each must reach the upstream, and the one through
	// Sluice must carry its headers: otherwise the run measures nothing.
	for _, c := range []struct {
		url  string
		auth bool
	}{{"http://" + withoutAddr + "/", false}, {"http://" + withAddr + "/", true}} {
		resp, err := http.Get(c.url)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(b, upstreamBody) {
			return fmt.Errorf("GET %s: %d %q, want 200 from the upstream", c.url, resp.StatusCode, b)
		}
		if got := resp.Header.Get("X-RateLimit-Limit") != ""; got != c.auth {
			return fmt.Errorf("GET %s: X-RateLimit-Limit present %v, want %v", c.url, got, c.auth)
		}
	}

	loadBefore := harness.LoadAvg()
	fmt.Fprintf(os.Stderr, "gateway: %d closed-loop, %d paced and %d single-connection steps of %v (wrk -t%d -c%d), load average %s\n", 2*o.runs, 4*o.runs, 2*o.runs, o.duration, o.threads, o.conns, loadBefore)
	var best [2]result
	for range o.runs {
		for i, s := range []struct {
			url  string
			ps   []*harness.Proc
			name string
		}{{"http://" + withoutAddr + "/", []*harness.Proc{without}, "nginx → upstream"},
			{"http://" + withAddr + "/", []*harness.Proc{with, sluice}, "nginx + auth_request to Sluice → upstream"}} {
			r, err := wrk(ctx, o, s.url, "", s.ps)
			if err != nil {
				return err
			}
			r.name = s.name
			if r.rps > best[i].rps {
				best[i] = r
			}
		}
	}
	rate := best[1].rps / 2
	// Latency: paced at half of the with-Sluice peak (the target's load)
	// and at a quarter of it (how the added latency depends on the load),
	// the same rate for both configs, then on one connection (closed
	// loop, no queueing), each config in turn, best (lowest p99) of the
	// runs, as for throughput.
	one := o
	one.conns, one.threads = 1, 1
	withoutURL, withURL := "http://"+withoutAddr+"/", "http://"+withAddr+"/"
	withoutPs, withPs := []*harness.Proc{without}, []*harness.Proc{with, sluice}
	steps := []struct {
		rate float64 // 0: one connection, closed loop
		url  string
		ps   []*harness.Proc
	}{
		{rate, withoutURL, withoutPs}, {rate, withURL, withPs},
		{rate / 2, withoutURL, withoutPs}, {rate / 2, withURL, withPs},
		{0, withoutURL, withoutPs}, {0, withURL, withPs},
	}
	var lat [6]result  // in the order of steps
	var short [6]error // the last shortfall of each paced step
	for range o.runs {
		for i, s := range steps {
			var r result
			var err error
			if s.rate == 0 {
				r, err = wrk(ctx, one, s.url, "", s.ps)
			} else {
				// Run-queue waits of the generator (this process), nginx,
				// Sluice (in both configs: idle without) and the upstream.
				waited := []int{os.Getpid(), s.ps[0].Cmd.Process.Pid, sluice.Cmd.Process.Pid, up.Cmd.Process.Pid}
				gc0, wait0 := gcs(), runqueueWaits(waited)
				up0, _ := harness.CPUTime(up.Cmd.Process.Pid)
				r, err = paced(ctx, o, s.url, s.rate, s.ps)
				r.gcs = gcs() - gc0
				if up1, _ := harness.CPUTime(up.Cmd.Process.Pid); r.paced != nil && r.paced.Sent > 0 {
					r.upCPU = (up1 - up0) / time.Duration(r.paced.Sent)
				}
				for i, w := range runqueueWaits(waited) {
					r.waits = append(r.waits, w-wait0[i])
				}
				if errors.Is(err, harness.ErrShortfall) {
					fmt.Fprintf(os.Stderr, "gateway: SHORTFALL, %s: %v\n", s.url, err)
					short[i], err = err, nil
					r.short = true
				}
			}
			if err != nil {
				return err
			}
			// The best run: one at the asked rate before one short of
			// it, then the lowest p99.
			if lat[i].requests == 0 || (lat[i].short && !r.short) || (lat[i].short == r.short && r.p99 < lat[i].p99) {
				lat[i] = r
			}
		}
	}
	report(os.Stdout, o, best, rate, lat, loadBefore, harness.LoadAvg())
	for i := range lat {
		if lat[i].short {
			return fmt.Errorf("a paced step fell short of its rate in every run, its latencies are not at the load asked: %w", short[i])
		}
	}
	return nil
}

var upstreamBody = []byte("hello from upstream\n")

// upstreamConf is the nginx upstream's http-block body: a fixed small
// body, keep-alive connections never closed by request count (the Go
// upstream does not close them either).
const upstreamConf = `server {
    listen %s;
    keepalive_requests 1000000;
    location / {
        default_type text/plain;
        return 200 "hello from upstream\n";
    }
}
`

// startUpstream starts the trivial upstream the nginx in front proxies
// to, on addr: a second nginx process (kind "nginx") or this program
// again as a net/http server (kind "go").
//
// nginx by default: the upstream stands for an application that is
// usually elsewhere, and it is the same in both configs, but on these 2
// cores its CPU is taken from the processes measured. On this machine the
// Go upstream cost 25–38 µs of CPU per request and was the busiest of the
// four processes (the most run-queue wait per request), nginx returning
// the same body 11 µs.
func startUpstream(ctx context.Context, procs *harness.Procs, kind, dir, addr string) (*harness.Proc, error) {
	var up *harness.Proc
	var err error
	if kind == "nginx" {
		up, err = procs.StartNginx(ctx, filepath.Join(dir, "upstream"), fmt.Sprintf(upstreamConf, addr))
	} else {
		var self string
		if self, err = os.Executable(); err != nil {
			return nil, err
		}
		up, err = procs.Start(ctx, "upstream", self, "upstream", addr)
	}
	if err != nil {
		return nil, err
	}
	return up, harness.WaitListen(ctx, addr, up)
}

// serveUpstream is the Go upstream: a fixed small body.
func serveUpstream(addr string) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(upstreamBody)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, h))
	os.Exit(1)
}

type result struct {
	name          string
	rps           float64
	requests      int64
	non2xx        int64
	p50, p99      time.Duration
	cpuPerRequest []time.Duration // per server process, in the order given
	paced         *harness.PacedResult
	short         bool            // paced, and short of the asked rate by more than 3 %
	gcs           int             // paced: Sluice's garbage collections during the step
	waits         []time.Duration // paced: run-queue waits of the generator, nginx, Sluice, the upstream
	upCPU         time.Duration   // paced: the upstream's CPU per request
}

// runqueueWaits reads harness.RunqueueWait of each process (0 if
// unreadable).
func runqueueWaits(pids []int) []time.Duration {
	w := make([]time.Duration, len(pids))
	for i, pid := range pids {
		w[i], _ = harness.RunqueueWait(pid)
	}
	return w
}

// wrk runs one closed-loop step and reads the servers' CPU time around it.
func wrk(ctx context.Context, o options, url, script string, servers []*harness.Proc) (result, error) {
	w, err := harness.Wrk(ctx, o.threads, o.conns, o.duration, url, script, servers...)
	return fromWrk(w), err
}

// paced sends GET / to the host of url open loop at rate requests/s
// (harness.Paced), the connection pool sized for the rate.
func paced(ctx context.Context, o options, url string, rate float64, servers []*harness.Proc) (result, error) {
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	p, err := harness.Paced(ctx, harness.PacedOptions{Addr: host, Request: harness.GetRequest(host, "/"), Rate: rate, Duration: o.duration}, servers...)
	if err != nil && !errors.Is(err, harness.ErrShortfall) {
		return result{}, err
	}
	if p.Errors > 0 {
		return result{}, fmt.Errorf("%s: %d of %d paced requests failed: %v", url, p.Errors, p.Sent, p.FirstErr)
	}
	return result{rps: p.Achieved, requests: p.Answered, non2xx: p.Non2xx, p50: p.P50, p99: p.P99, cpuPerRequest: p.ServerCPU, paced: &p}, err
}

func fromWrk(w harness.WrkResult) result {
	return result{rps: w.RPS, requests: w.Requests, non2xx: w.Non2xx, p50: w.P50, p99: w.P99, cpuPerRequest: w.CPUPerRequest}
}

// report prints the tables; lat holds the paced runs at half of the
// with-Sluice peak without and with Sluice, the same at a quarter, then
// the single-connection runs without and with.
func report(w io.Writer, o options, best [2]result, rate float64, lat [6]result, loadBefore, loadAfter string) {
	pw, pa, qw, qa, sw, sa := lat[0], lat[1], lat[2], lat[3], lat[4], lat[5]
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Fprintf(w, "Gateway run %s, %d cores, wrk -t%d -c%d, %v per step, best of %d interleaved run(s) (throughput: highest requests/s; latency: lowest p99), one nginx process, the %s upstream, Sluice's GOMAXPROCS %s, everything on one machine over loopback.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), harness.NumCPU(), o.threads, o.conns, o.duration, o.runs, o.upstream, procsName(o.procs))
	fmt.Fprintf(w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", loadBefore, loadAfter)
	fmt.Fprintln(w, "| step | requests/s | p50 | p99 | non-2xx | nginx CPU/request | Sluice CPU/request |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	row := func(name string, r result) {
		sl := "–"
		if len(r.cpuPerRequest) > 1 {
			sl = fmt.Sprintf("%.1f µs", us(r.cpuPerRequest[1]))
		}
		fmt.Fprintf(w, "| %s | %.0f | %v | %v | %d | %.1f µs | %s |\n", name, r.rps, r.p50, r.p99, r.non2xx, us(r.cpuPerRequest[0]), sl)
	}
	row(best[0].name, best[0])
	row(best[1].name, best[1])
	row(fmt.Sprintf("nginx → upstream, paced at %.0f/s", rate), pw)
	row(fmt.Sprintf("nginx + Sluice → upstream, paced at %.0f/s", rate), pa)
	row(fmt.Sprintf("nginx → upstream, paced at %.0f/s", rate/2), qw)
	row(fmt.Sprintf("nginx + Sluice → upstream, paced at %.0f/s", rate/2), qa)
	row("nginx → upstream, one connection", sw)
	row("nginx + Sluice → upstream, one connection", sa)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Paced, open loop (uniform schedule, latency from each request's intended send time; send lag: how late the generator sent; from the send: latency as a closed-loop tool would time it, without the send lag (it hides queueing: shown to tell the servers' share of a tail from the generator's); CPU pressure: share of the step during which some task of the machine waited for a core; run-queue wait: time each process spent ready to run but waiting for a core, per request (/proc/PID/task/*/schedstat); GCs: Sluice's garbage collections in the step):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| config | asked/s | achieved/s | conns | p50 | p90 | p99 | p99.9 | max | send lag p99 | p50 / p99 from the send | CPU pressure | run-queue wait/request: generator / nginx / Sluice / upstream | Sluice GCs | generator CPU/request | upstream CPU/request |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range []struct {
		name string
		r    result
	}{{"nginx → upstream", pw}, {"nginx + Sluice → upstream", pa}, {"nginx → upstream", qw}, {"nginx + Sluice → upstream", qa}} {
		p := c.r.paced
		short := ""
		if c.r.short {
			short = " **SHORT**"
		}
		var waits []string
		for _, d := range c.r.waits {
			waits = append(waits, fmt.Sprintf("%.1f", us(d)/float64(p.Sent)))
		}
		pre := strings.Join(waits, " / ") + " µs"
		fmt.Fprintf(w, "| %s | %.0f | %.0f%s | %d | %v | %v | %v | %v | %v | %v | %v / %v | %.0f%% | %s | %d | %.1f µs | %.1f µs |\n", c.name, p.Asked, p.Achieved, short, p.Conns,
			round(p.P50), round(p.P90), round(p.P99), round(p.P999), round(p.Max), round(p.LagP99), round(p.SentP50), round(p.SentP99),
			100*p.CPUPressure, pre, c.r.gcs, us(p.CPUPerRequest), us(c.r.upCPU))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- with the auth_request to Sluice: %.0f%% of nginx's own throughput (target ≥ 50%%)\n", 100*best[1].rps/best[0].rps)
	fmt.Fprintf(w, "- closed loop: Sluice adds %v at p50, %v at p99\n", best[1].p50-best[0].p50, best[1].p99-best[0].p99)
	added := func(name string, r float64, a, b result) {
		fmt.Fprintf(w, "- paced at %s (%.0f req/s asked; got %.0f without, %.0f with): Sluice adds %v at p50, %v at p90, %v at p99 and %v at p99.9 (from the send: %v at p50, %v at p99); CPU pressure %.0f%% → %.0f%%\n",
			name, r, a.rps, b.rps, round(b.p50-a.p50), round(b.paced.P90-a.paced.P90), round(b.p99-a.p99), round(b.paced.P999-a.paced.P999),
			round(b.paced.SentP50-a.paced.SentP50), round(b.paced.SentP99-a.paced.SentP99), 100*a.paced.CPUPressure, 100*b.paced.CPUPressure)
	}
	added("half of the with-Sluice peak (target < 1ms at p99)", rate, pw, pa)
	added("a quarter of it", rate/2, qw, qa)
	// The whole machine's CPU per paced request: how busy the 2 cores
	// were, which is what the tail queues for.
	total := func(r result) (time.Duration, string) {
		p := r.paced
		parts := []time.Duration{p.CPUPerRequest, r.cpuPerRequest[0]}
		if len(r.cpuPerRequest) > 1 {
			parts = append(parts, r.cpuPerRequest[1])
		}
		parts = append(parts, r.upCPU)
		var sum time.Duration
		var strs []string
		for _, d := range parts {
			sum += d
			strs = append(strs, fmt.Sprintf("%.1f", us(d)))
		}
		return sum, strings.Join(strs, " + ")
	}
	for _, c := range []struct {
		name string
		a, b result
	}{{"half of peak", pw, pa}, {"a quarter of peak", qw, qa}} {
		ta, partsA := total(c.a)
		tb, partsB := total(c.b)
		fmt.Fprintf(w, "- paced at %s, CPU per request of the generator + nginx (+ Sluice) + the upstream: %s = %.1f µs without (%.2f of the %d cores), %s = %.1f µs with (%.2f)\n",
			c.name, partsA, us(ta), ta.Seconds()*c.a.paced.Asked, harness.NumCPU(), partsB, us(tb), tb.Seconds()*c.b.paced.Asked)
	}
	fmt.Fprintf(w, "- one connection (no queueing): Sluice adds %v at p50 and %v at p99\n", sa.p50-sw.p50, sa.p99-sw.p99)
	fmt.Fprintf(w, "- CPU per request: nginx %.1f µs alone, %.1f µs with the subrequest, plus Sluice %.1f µs\n",
		us(best[0].cpuPerRequest[0]), us(best[1].cpuPerRequest[0]), us(best[1].cpuPerRequest[1]))
}

func procsName(n int) string {
	if n == 0 {
		return "Go's default"
	}
	return fmt.Sprint(n)
}

// round keeps 3 significant digits or so: µs under 1 ms, 10 µs above.
func round(d time.Duration) time.Duration {
	if d < time.Millisecond && d > -time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

func replaceAll(s string, oldnew ...string) (string, error) {
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			return "", fmt.Errorf("the example has no %q", oldnew[i])
		}
		s = strings.ReplaceAll(s, oldnew[i], oldnew[i+1])
	}
	return s, nil
}
