// Command gateway measures what asking Sluice costs nginx: in one bounded
// run on loopback, wrk against nginx proxying to a trivial upstream, with
// and without the auth_request to Sluice of examples/gateways/nginx. Both
// nginx configs are the example's, the second with its auth_request line
// turned off, so the difference is the question to Sluice and nothing
// else. A third config, closed loop only, asks a second Sluice over a
// Unix socket (the example's commented server unix:… line), interleaved
// with the other two. It prints a Markdown report: requests/s (closed loop, wrk), the
// latency paced at half of the with-Sluice peak and at a quarter of it
// (open loop, the same rate for both configs, harness.Paced) and on a
// single connection (wrk, no queueing), and the CPU per request of nginx
// and of Sluice, read from /proc/PID/stat. About 3.5 minutes with
// the defaults.
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
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

type options struct {
	duration time.Duration
	threads  int
	conns    int
	runs     int
	procs    int     // Sluice's GOMAXPROCS, 0 for Go's default
	rate     float64 // the paced steps' rate, 0 for half of the with-Sluice peak
	upstream string  // "nginx" or "go"
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
	flag.Float64Var(&o.rate, "paced-rate", 0, "pace the latency steps at this rate (requests/s) and at half of it, instead of at half and a quarter of the with-Sluice peak: A/B runs at one load")
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

	ports, err := harness.FreePorts(5)
	if err != nil {
		return err
	}
	upstreamAddr, sluiceAddr, withAddr, withoutAddr, unixAddr := ports[0], ports[1], ports[2], ports[3], ports[4]

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
	// The second Sluice, on a Unix socket, trusting its peer (the
	// example's commented alternatives), its output discarded.
	sock := filepath.Join(dir, "api.sock")
	uy, err := replaceAll(y, "listen: "+sluiceAddr, "listen: unix:"+sock,
		"  trusted_proxies: [127.0.0.1/32]\n", "", `  #trusted_proxies: [127.0.0.1/32, "unix:"]`, `  trusted_proxies: [127.0.0.1/32, "unix:"]`)
	if err != nil {
		return err
	}
	unixConf := filepath.Join(dir, "sluice-unix.yaml")
	if err := os.WriteFile(unixConf, []byte(uy), 0o644); err != nil {
		return err
	}
	unixSluice := &harness.Proc{Name: "sluice (Unix socket)", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, sluiceBin, "serve", "-config", unixConf)}
	if o.procs > 0 {
		unixSluice.Cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", o.procs))
	}
	if err := unixSluice.Cmd.Start(); err != nil {
		return fmt.Errorf("start sluice: %w", err)
	}
	procs.Add(unixSluice)
	if err := harness.WaitListen(ctx, "unix:"+sock, unixSluice); err != nil {
		return err
	}

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
		if name == "unix" {
			if conf, err = replaceAll(conf, "    server "+sluiceAddr+";\n", "", "#server unix:/run/sluice/api.sock;", "server unix:"+sock+";"); err != nil {
				return nil, err
			}
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
	overUnix, err := start("unix", unixAddr, true)
	if err != nil {
		return err
	}

	// A request through each must reach the upstream, and the one through
	// Sluice must carry its headers: otherwise the run measures nothing.
	for _, c := range []struct {
		url  string
		auth bool
	}{{"http://" + withoutAddr + "/", false}, {"http://" + withAddr + "/", true}, {"http://" + unixAddr + "/", true}} {
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
	fmt.Fprintf(os.Stderr, "gateway: %d closed-loop, %d paced and %d single-connection steps of %v (wrk -t%d -c%d), load average %s\n", 3*o.runs, 4*o.runs, 2*o.runs, o.duration, o.threads, o.conns, loadBefore)
	var best [3]result
	for range o.runs {
		for i, s := range []struct {
			url  string
			ps   []*harness.Proc
			name string
		}{{"http://" + withoutAddr + "/", []*harness.Proc{without}, "nginx → upstream"},
			{"http://" + withAddr + "/", []*harness.Proc{with, sluice}, "nginx + auth_request to Sluice → upstream"},
			{"http://" + unixAddr + "/", []*harness.Proc{overUnix, unixSluice}, "nginx + auth_request to Sluice over a Unix socket → upstream"}} {
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
	if o.rate > 0 {
		rate = o.rate
	}
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
			if lowerTail(r, lat[i]) {
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
