// Command fleetload is the fleet's daemon-level load run: in one bounded
// run on loopback it starts one redis-server and three `sluice serve`
// instances on it (one config, free 127.0.0.1 ports), and drives POST
// /v1/check over keep-alive connections spread evenly over the three, one
// request in flight on each (-pipeline N: N, HTTP/1.1 pipelining), at a
// fixed concurrency, for each fleet mode of a token bucket rule:
//
//   - plain: no fleet option (exact: one Redis script per decision),
//   - sync: 100ms (soft limit: decide locally, one batch per interval),
//   - lease: auto (hard limit: reserve quota in chunks),
//
// on one hot key and on 100,000 keys, with a generous limit (everything
// admitted), and on one hot key at overload (a limit of 2,000/s, far under
// what the clients ask). With -bound (the default) it then measures the
// soft bound through the daemons, once per run: a per-minute fixed window
// with sync: 100ms asked 10× its limit, paced evenly over the three, and
// how far over the limit the fleet admits beside the formula. It prints a Markdown table: decisions/s, the ratio
// to plain in the same run, the three daemons' CPU per decision (summed,
// from /proc/PID/stat), Redis's CPU per decision and Redis commands per
// decision (INFO stats total_commands_processed, which counts the commands
// scripts run too).
//
//	cd bench && go run ./fleetload                  # 3s per cell, c=64
//	cd bench && go run ./fleetload -d 5s -c 128 -runs 2
//	cd bench && go run ./fleetload -cluster -bound=false   # on a 3-node Redis Cluster
//
// With -runs N the cells run N times interleaved and each keeps its best
// run; -modes and -keys pick cells, -sluice runs a given binary (to profile
// it). The client is an event loop of raw system calls (harness.Closed,
// as wrk): it shares the machine's cores with the daemons, and net/http's
// client costs about as much CPU per request as a daemon's whole decision,
// a goroutine per connection on Go's netpoller about twice the loop's. Its
// CPU per decision is printed beside the daemons'. Needs redis-server on
// PATH; Linux only (/proc, epoll).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetload:", err)
		os.Exit(1)
	}
}

// modes are the rule variants, by rule-name suffix and fleet option.
var modes = []struct{ name, option string }{
	{"plain", ""},
	{"sync", "    sync: 100ms\n"},
	{"lease", "    lease: auto\n"},
}

// overloadRate is the limit of the overload rules: far below what the
// clients ask of one hot key, so most answers are refusals.
const overloadRate = 2000

// config is the one config of the three instances: per mode a generous
// rule (<mode>) and an overload rule (<mode>-over).
func config(listen string, redis []string, cluster bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nlog_level: warn\nstore:\n  type: redis\n  redis:\n    addrs: [%s]\n    cluster: %v\n    timeout: 1s\nrules:\n", listen, strings.Join(redis, ", "), cluster)
	// The throughput rules name themselves in /v1/check; their match
	// keeps them off the forward-auth requests of the bound run.
	for _, m := range modes {
		fmt.Fprintf(&b, "  - name: %s\n    match: {path: /cells}\n    key: [ip]\n    rate: 100000000/s\n    algorithm: token_bucket\n%s", m.name, m.option)
		fmt.Fprintf(&b, "  - name: %s-over\n    match: {path: /cells}\n    key: [ip]\n    rate: %d/s\n    algorithm: token_bucket\n%s", m.name, overloadRate, m.option)
	}
	fmt.Fprintf(&b, "  - name: bound\n    match: {path: /bound}\n    key: [\"header:X-Run\"]\n    rate: %d/m\n    algorithm: fixed_window\n    sync: %v\n", boundLimit, boundSync)
	return []byte(b.String())
}

// The soft bound through the daemons: a per-minute fixed window under 10×
// overload, sync: 100ms, asked of the three daemons at an even pace
// through /v1/forward-auth (429 when refused), for boundRun from a fresh
// key inside one window.
const (
	boundLimit    = 1000
	boundSync     = 100 * time.Millisecond
	boundOverload = 10
	boundRun      = 10 * time.Second
)

// measureBound runs the bound measurement (key run) and returns the
// requests admitted, asked, and the largest p99 latency of the three.
func measureBound(ctx context.Context, apis []string, run int) (admitted, asked int64, p99 time.Duration, err error) {
	// Stay inside one minute's window: start at most 45 s into it.
	if now := time.Now(); now.Second() > 45 {
		wait := now.Truncate(time.Minute).Add(time.Minute + 500*time.Millisecond).Sub(now)
		fmt.Fprintf(os.Stderr, "  bound run %d: waiting %v for the next minute's window\n", run, wait.Round(time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		}
	}
	rate := float64(boundLimit*boundOverload) / 60 / float64(len(apis))
	var wg sync.WaitGroup
	results := make([]harness.PacedResult, len(apis))
	errs := make([]error, len(apis))
	for i, api := range apis {
		req := []byte(fmt.Sprintf("GET /v1/forward-auth HTTP/1.1\r\nHost: %s\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /bound\r\nX-Run: fleetload-%d-%d\r\n\r\n", api, os.Getpid(), run))
		wg.Go(func() {
			results[i], errs[i] = harness.Paced(ctx, harness.PacedOptions{Addr: api, Request: req, Rate: rate, Duration: boundRun, Conns: 4})
		})
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil && !errors.Is(errs[i], harness.ErrShortfall) {
			return 0, 0, 0, fmt.Errorf("bound, %s: %w", apis[i], errs[i])
		}
		if r.Errors > 0 {
			return 0, 0, 0, fmt.Errorf("bound, %s: %d requests failed: %v", apis[i], r.Errors, r.FirstErr)
		}
		admitted += r.Answered - r.Non2xx
		asked += r.Answered
		p99 = max(p99, r.P99)
	}
	return admitted, asked, p99, nil
}

type cell struct {
	mode string // plain, sync, lease
	keys int
	over bool
}

func (c cell) rule() string {
	if c.over {
		return c.mode + "-over"
	}
	return c.mode
}

func (c cell) load() string {
	if c.over {
		return fmt.Sprintf("overload (%d/s)", overloadRate)
	}
	return "admitted"
}

type result struct {
	n, allowed int64
	rate       float64 // decisions/s
	admitted   float64 // allowed/s
	daemonCPU  time.Duration
	daemonSys  time.Duration // of daemonCPU, in the kernel
	redisCPU   time.Duration
	clientCPU  time.Duration
	redisCmds  float64
}

type options struct {
	duration time.Duration
	conc     int
	keys     []int
	runs     int
	over     bool
	modes    map[string]bool
	loops    int
	bound    bool
	cluster  bool
	depth    int
}

func run() error {
	var o options
	var keys string
	flag.DurationVar(&o.duration, "d", 3*time.Second, "duration of each measured cell (at most 20s)")
	flag.IntVar(&o.conc, "c", 64, "connections, spread over the 3 instances (one request in flight on each, or -pipeline)")
	flag.StringVar(&keys, "keys", "1,100000", "key counts")
	flag.IntVar(&o.runs, "runs", 1, "runs of every cell, interleaved; each cell keeps its best")
	flag.BoolVar(&o.over, "overload", true, "add the overload cells (one hot key)")
	prebuilt := flag.String("sluice", "", "a sluice binary to run instead of building ./cmd/sluice (for profiling)")
	modeList := flag.String("modes", "plain,sync,lease", "the modes to run")
	genProcs := flag.Int("procs", 0, "GOMAXPROCS of the load generator itself (not of the daemons); 0: Go's default")
	flag.BoolVar(&o.bound, "bound", true, "also measure the soft bound through the daemons (sync at 10× overload of a per-minute rule, once per run)")
	flag.IntVar(&o.depth, "pipeline", 1, "requests in flight per connection (HTTP/1.1 pipelining); 1: one request per round trip, the default measurement")
	flag.BoolVar(&o.cluster, "cluster", false, "run the daemons on a 3-node Redis Cluster (3 masters, no replicas) instead of one redis-server")
	flag.IntVar(&o.loops, "loops", 1, "event loops (OS threads) of the load generator, the connections split over them")
	flag.Parse()
	if *genProcs > 0 {
		runtime.GOMAXPROCS(*genProcs)
	}
	o.modes = map[string]bool{}
	for _, m := range strings.Split(*modeList, ",") {
		o.modes[strings.TrimSpace(m)] = true
	}
	for _, f := range strings.Split(keys, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 10_000_000 {
			return fmt.Errorf("-keys %q: want whole numbers in [1, 10^7] separated by commas", keys)
		}
		o.keys = append(o.keys, n)
	}
	if o.duration <= 0 || o.duration > 20*time.Second {
		return errors.New("-d must be in (0, 20s]")
	}
	if o.conc < 3 || o.conc > 1024 {
		return errors.New("-c must be in [3, 1024]")
	}
	if o.runs < 1 || o.runs > 5 {
		return errors.New("-runs must be in [1, 5]")
	}
	if o.depth < 1 || o.depth > 64 {
		return errors.New("-pipeline must be in [1, 64]")
	}
	if o.loops < 1 || o.loops > o.conc {
		return errors.New("-loops must be in [1, -c]")
	}
	dir, err := os.MkdirTemp("", "sluice-fleetload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	sluice := *prebuilt
	if sluice == "" {
		if sluice, err = harness.BuildSluice(ctx, dir); err != nil {
			return err
		}
	}
	nodes := 1
	if o.cluster {
		nodes = 3
	}
	ports, err := harness.FreePorts(nodes + 3)
	if err != nil {
		return err
	}
	redisAddrs, apis := ports[:nodes], ports[nodes:]
	var procs harness.Procs
	defer procs.StopAll()
	var redisPs []*harness.Proc
	if o.cluster {
		redisPs, err = procs.StartRedisCluster(ctx, redisAddrs, dir)
	} else {
		var p *harness.Proc
		p, err = procs.StartRedis(ctx, redisAddrs[0], dir)
		redisPs = []*harness.Proc{p}
	}
	if err != nil {
		return err
	}
	var daemons []*harness.Proc
	for i, api := range apis {
		cfg := filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", i))
		if err := os.WriteFile(cfg, config(api, redisAddrs, o.cluster), 0o644); err != nil {
			return err
		}
		p, err := procs.Start(ctx, fmt.Sprintf("sluice-%d", i), sluice, "serve", "-config", cfg)
		if err != nil {
			return err
		}
		daemons = append(daemons, p)
	}
	for i, api := range apis {
		if err := harness.WaitTCP(ctx, api); err != nil {
			return fmt.Errorf("sluice-%d: %w\n%s", i, err, daemons[i].Logs.String())
		}
	}

	var cells []cell
	for _, k := range o.keys {
		for _, m := range modes {
			if o.modes[m.name] {
				cells = append(cells, cell{mode: m.name, keys: k})
			}
		}
	}
	if o.over {
		for _, m := range modes {
			if o.modes[m.name] {
				cells = append(cells, cell{mode: m.name, keys: 1, over: true})
			}
		}
	}
	loadBefore := harness.LoadAvg()
	fmt.Fprintf(os.Stderr, "fleetload: %d cells × %d runs of %v, c=%d, load average %s\n", len(cells), o.runs, o.duration, o.conc, loadBefore)
	// Loop j holds connections j, j+loops, …: each spread evenly over
	// the three instances.
	var loops []*harness.Closed
	for j := range o.loops {
		var addrs []string
		for w := j; w < o.conc; w += o.loops {
			addrs = append(addrs, apis[w%len(apis)])
		}
		l, err := harness.NewClosed(addrs, len(addrs), 5*time.Second)
		if err != nil {
			return err
		}
		defer l.Close()
		l.Depth = o.depth
		loops = append(loops, l)
	}
	best := make([]result, len(cells))
	all := make([][]result, o.runs) // per run, per cell: for the ratios within each run
	for r := range o.runs {
		for i, c := range cells {
			res, err := measure(ctx, o, loops, apis, daemons, redisPs, redisAddrs, c)
			if err != nil {
				return fmt.Errorf("%s keys=%d %s: %w", c.mode, c.keys, c.load(), err)
			}
			fmt.Fprintf(os.Stderr, "  run %d %-6s keys=%-7d %-16s %9.0f/s admitted %9.0f/s daemons %5.1fµs (kernel %4.1f) redis %5.2fµs client %5.1fµs cmds %.3f\n",
				r+1, c.mode, c.keys, c.load(), res.rate, res.admitted, us(res.daemonCPU), us(res.daemonSys), us(res.redisCPU), us(res.clientCPU), res.redisCmds)
			all[r] = append(all[r], res)
			if res.rate > best[i].rate {
				best[i] = res
			}
		}
	}
	report(os.Stdout, o, cells, best, all, loadBefore)
	if o.bound {
		// The bound: (n−1)/n · λ · (2·interval + RTT), RTT taken as 0.
		n := float64(len(apis))
		lambda := float64(boundLimit*boundOverload) / 60
		formula := (n - 1) / n * lambda * 2 * boundSync.Seconds()
		fmt.Printf("\nThe soft bound through the daemons: 3 daemons, rule %d/minute fixed_window with sync: %v, asked %d× (%.1f/s spread evenly) through /v1/forward-auth for %v from a fresh key in one window; nominal bound (n−1)/n·λ·2·interval = %.1f (%.2f %%).\n\n",
			boundLimit, boundSync, boundOverload, lambda, boundRun, formula, 100*formula/boundLimit)
		fmt.Println("| run | asked | admitted | over the limit | of the limit | p99 |")
		fmt.Println("|---:|---:|---:|---:|---:|---:|")
		for run := 1; run <= o.runs; run++ {
			admitted, asked, p99, err := measureBound(ctx, apis, run)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "  bound run %d: %d of %d admitted\n", run, admitted, asked)
			fmt.Printf("| %d | %d | %d | %d | %.2f %% | %v |\n", run, asked, admitted, admitted-boundLimit, 100*float64(admitted-boundLimit)/boundLimit, p99.Round(time.Microsecond))
		}
	}
	return nil
}

// sysTime is a process's system CPU time (/proc/PID/stat stime); 0 if
// unreadable.
func sysTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(st) * time.Second / 100 // USER_HZ
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// measure runs one cell: o.conc connections, connection w on instance
// w%3, for o.duration after a warm-up of a second (which also fills the
// sync batches and the leases).
func measure(ctx context.Context, o options, loops []*harness.Closed, apis []string, daemons []*harness.Proc, redisPs []*harness.Proc, redisAddrs []string, c cell) (result, error) {
	prefix := `{"rule":"` + c.rule() + `","key":"k`
	phase := func(d time.Duration) (result, error) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			r     result
			first error
		)
		for j, l := range loops {
			wg.Go(func() {
				// Per connection: its key stream, and its request
				// buffer (head, then body).
				var rnds []*rand.Rand
				var reqs [][]byte
				var hosts []string
				for w := j; w < o.conc; w += len(loops) {
					rnds = append(rnds, rand.New(rand.NewPCG(uint64(w), 7)))
					reqs = append(reqs, make([]byte, 0, 256))
					hosts = append(hosts, apis[w%len(apis)])
				}
				var body []byte
				next := func(i int) []byte {
					body = append(body[:0], prefix...)
					body = strconv.AppendInt(body, int64(rnds[i].IntN(c.keys)), 10)
					body = append(body, `"}`...)
					b := append(reqs[i][:0], "POST /v1/check HTTP/1.1\r\nHost: "...)
					b = append(b, hosts[i]...)
					b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
					b = strconv.AppendInt(b, int64(len(body)), 10)
					b = append(b, "\r\n\r\n"...)
					b = append(b, body...)
					reqs[i] = b
					return b
				}
				var ok int64
				done := func(i, status int, answer []byte) error {
					if status != 200 {
						return fmt.Errorf("%s: %d %s", hosts[i], status, answer)
					}
					if bytes.Contains(answer, []byte(`"allowed":true`)) {
						ok++
					}
					return nil
				}
				n, err := l.Run(ctx, d, next, done)
				mu.Lock()
				r.n += n
				r.allowed += ok
				if first == nil {
					first = err
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return r, first
	}
	if _, err := phase(time.Second); err != nil {
		return result{}, err
	}
	var sys0, sys1 time.Duration // the daemons' time in the kernel
	cpu := func(sys *time.Duration) (time.Duration, time.Duration, error) {
		var sum time.Duration
		*sys = 0
		for _, p := range daemons {
			t, err := harness.CPUTime(p.Cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			sum += t
			*sys += sysTime(p.Cmd.Process.Pid)
		}
		var rt time.Duration
		for _, p := range redisPs {
			t, err := harness.CPUTime(p.Cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			rt += t
		}
		return sum, rt, nil
	}
	// Every node's commands (one node but for -cluster).
	redisCommands := func() (int64, error) {
		var n int64
		for _, a := range redisAddrs {
			c, err := harness.RedisCommands(a)
			if err != nil {
				return 0, err
			}
			n += c
		}
		return n, nil
	}
	d0, r0, err := cpu(&sys0)
	if err != nil {
		return result{}, err
	}
	cmds0, err := redisCommands()
	if err != nil {
		return result{}, err
	}
	c0 := harness.SelfCPU()
	t0 := time.Now()
	res, err := phase(o.duration)
	elapsed := time.Since(t0)
	c1 := harness.SelfCPU()
	if err != nil {
		return result{}, err
	}
	cmds1, err := redisCommands()
	if err != nil {
		return result{}, err
	}
	d1, r1, err := cpu(&sys1)
	if err != nil {
		return result{}, err
	}
	if res.n == 0 {
		return result{}, errors.New("no decisions")
	}
	res.rate = float64(res.n) / elapsed.Seconds()
	res.admitted = float64(res.allowed) / elapsed.Seconds()
	res.daemonCPU = (d1 - d0) / time.Duration(res.n)
	res.daemonSys = (sys1 - sys0) / time.Duration(res.n)
	res.redisCPU = (r1 - r0) / time.Duration(res.n)
	res.clientCPU = (c1 - c0) / time.Duration(res.n)
	res.redisCmds = float64(cmds1-cmds0-int64(len(redisAddrs))) / float64(res.n) // minus our own INFOs
	if !c.over && res.allowed != res.n {
		return res, fmt.Errorf("%d of %d answers refused: the generous limit should admit everything", res.n-res.allowed, res.n)
	}
	return res, nil
}

func report(w io.Writer, o options, cells []cell, rs []result, all [][]result, loadBefore string) {
	redis := "one redis-server"
	if o.cluster {
		redis = "a 3-node Redis Cluster (3 masters; one hot key lives on one of them; Redis figures summed over the three)"
	}
	inflight := "one request in flight per connection"
	if o.depth > 1 {
		inflight = fmt.Sprintf("**pipelined: %d requests in flight per connection** (HTTP/1.1 pipelining; not comparable with one request per round trip)", o.depth)
	}
	fmt.Fprintf(w, "\n3 `sluice serve` on %s, POST /v1/check on %d keep-alive connections (spread evenly), %s, %v per cell after a 1s warm-up, best of %d; token_bucket; load average before %s, after %s; %d CPUs shared by the clients, the daemons and Redis.\n\n",
		redis, o.conc, inflight, o.duration, o.runs, loadBefore, harness.LoadAvg(), harness.NumCPU())
	fmt.Fprintln(w, "| mode | keys | load | decisions/s | ÷ plain (best) | ÷ plain in each run | admitted/s | daemon CPU µs/decision (3 summed) | Redis CPU µs/decision | client CPU µs/decision | all CPU µs/decision | plain's ÷ this (CPU) | Redis commands/decision |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	// CPU per decision of every process: what two busy cores divide.
	allCPU := func(r result) time.Duration { return r.daemonCPU + r.redisCPU + r.clientCPU }
	plainCPU := map[[2]int]time.Duration{}
	for i, c := range cells {
		if c.mode == "plain" {
			plainCPU[[2]int{c.keys, b2i(c.over)}] = allCPU(rs[i])
		}
	}
	plainOf := func(rs []result) map[[2]int]float64 {
		m := map[[2]int]float64{}
		for i, c := range cells {
			if c.mode == "plain" && i < len(rs) {
				m[[2]int{c.keys, b2i(c.over)}] = rs[i].rate
			}
		}
		return m
	}
	plain := plainOf(rs)
	plains := make([]map[[2]int]float64, len(all))
	for r := range all {
		plains[r] = plainOf(all[r])
	}
	for i, c := range cells {
		r := rs[i]
		ratio := "—"
		if p := plain[[2]int{c.keys, b2i(c.over)}]; p > 0 {
			ratio = fmt.Sprintf("%.2f×", r.rate/p)
		}
		opt := c.mode
		switch c.mode {
		case "sync":
			opt = "`sync: 100ms`"
		case "lease":
			opt = "`lease: auto`"
		}
		var each []string
		for run := range all {
			if p := plains[run][[2]int{c.keys, b2i(c.over)}]; p > 0 && i < len(all[run]) {
				each = append(each, fmt.Sprintf("%.2f×", all[run][i].rate/p))
			}
		}
		cpuRatio := "—"
		if p := plainCPU[[2]int{c.keys, b2i(c.over)}]; p > 0 && allCPU(r) > 0 {
			cpuRatio = fmt.Sprintf("%.2f×", float64(p)/float64(allCPU(r)))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %s | %.0f | %.1f | %.2f | %.1f | %.1f | %s | %.3f |\n",
			opt, c.keys, c.load(), r.rate, ratio, strings.Join(each, ", "), r.admitted, us(r.daemonCPU), us(r.redisCPU), us(r.clientCPU), us(allCPU(r)), cpuRatio, r.redisCmds)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
