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
// With -unix, three more daemons on the same Redis listen on Unix sockets
// (listen: unix:/PATH, an app beside a Sluice sidecar), and every admitted
// cell runs a second time with the load generator on those sockets, the
// TCP and the Unix-socket cell of a mode one after the other; the
// overload cells and the bound run stay on TCP. A table then divides the
// Unix socket's decisions/s by TCP's.
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
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetload:", err)
		os.Exit(1)
	}
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
	unix     bool
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
	flag.BoolVar(&o.unix, "unix", false, "also run every admitted cell over Unix sockets: 3 more daemons on the same Redis with listen: unix:/PATH, the load generator on their sockets")
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
	// With -unix, the same three again on Unix sockets in dir (a short
	// path: a socket's holds 107 bytes).
	var unixAPIs []string
	var unixDaemons []*harness.Proc
	if o.unix {
		for i := range apis {
			api := "unix:" + filepath.Join(dir, fmt.Sprintf("api-%d.sock", i))
			cfg := filepath.Join(dir, fmt.Sprintf("sluice-unix-%d.yaml", i))
			if err := os.WriteFile(cfg, config(api, redisAddrs, o.cluster), 0o644); err != nil {
				return err
			}
			p, err := procs.Start(ctx, fmt.Sprintf("sluice-unix-%d", i), sluice, "serve", "-config", cfg)
			if err != nil {
				return err
			}
			unixAPIs, unixDaemons = append(unixAPIs, api), append(unixDaemons, p)
		}
	}
	for i, api := range apis {
		if err := harness.WaitTCP(ctx, api); err != nil {
			return fmt.Errorf("sluice-%d: %w\n%s", i, err, daemons[i].Logs.String())
		}
	}
	for i, api := range unixAPIs {
		if err := harness.WaitListen(ctx, api, unixDaemons[i]); err != nil {
			return fmt.Errorf("%w\n%s", err, unixDaemons[i].Logs.String())
		}
	}

	var cells []cell
	for _, k := range o.keys {
		for _, m := range modes {
			if o.modes[m.name] {
				cells = append(cells, cell{mode: m.name, keys: k})
				if o.unix {
					cells = append(cells, cell{mode: m.name, keys: k, unix: true})
				}
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
	loops, err := newLoops(o, apis)
	if err != nil {
		return err
	}
	defer closeLoops(loops)
	var unixLoops []*harness.Closed
	if o.unix {
		if unixLoops, err = newLoops(o, unixAPIs); err != nil {
			return err
		}
		defer closeLoops(unixLoops)
	}
	best := make([]result, len(cells))
	all := make([][]result, o.runs) // per run, per cell: for the ratios within each run
	for r := range o.runs {
		for i, c := range cells {
			ls, as, ds := loops, apis, daemons
			if c.unix {
				ls, as, ds = unixLoops, unixAPIs, unixDaemons
			}
			res, err := measure(ctx, o, ls, as, ds, redisPs, redisAddrs, c)
			if err != nil {
				return fmt.Errorf("%s %s keys=%d %s: %w", c.mode, c.network(), c.keys, c.load(), err)
			}
			fmt.Fprintf(os.Stderr, "  run %d %-6s %-4s keys=%-7d %-16s %9.0f/s admitted %9.0f/s daemons %5.1fµs (kernel %4.1f) redis %5.2fµs client %5.1fµs cmds %.3f\n",
				r+1, c.mode, c.network(), c.keys, c.load(), res.rate, res.admitted, us(res.daemonCPU), us(res.daemonSys), us(res.redisCPU), us(res.clientCPU), res.redisCmds)
			all[r] = append(all[r], res)
			if res.rate > best[i].rate {
				best[i] = res
			}
		}
	}
	report(os.Stdout, o, cells, best, all, loadBefore)
	reportUnix(os.Stdout, cells, best, all)
	if o.bound {
		lambda := float64(boundLimit*boundOverload) / time.Minute.Seconds()
		formula := nominalBound(len(apis), lambda, boundSync)
		fmt.Printf("\nThe soft bound through the daemons: %d daemons, rule %d/minute fixed_window with sync: %v, asked %d× (%.1f/s spread evenly) through /v1/forward-auth for %v from a fresh key in one window; nominal bound (n−1)/n·λ·2·interval (the RTT left out) = %.1f (%.2f %%).\n\n",
			len(apis), boundLimit, boundSync, boundOverload, lambda, boundRun, formula, 100*formula/boundLimit)
		fmt.Println("| run | asked | admitted | over the limit | of the limit | p99 (the worst daemon's) |")
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

// newLoops builds o.loops event loops on o.conc connections to apis: loop
// j holds connections j, j+loops, …, each spread evenly over the
// instances.
func newLoops(o options, apis []string) ([]*harness.Closed, error) {
	var loops []*harness.Closed
	for j := range o.loops {
		var addrs []string
		for w := j; w < o.conc; w += o.loops {
			addrs = append(addrs, apis[w%len(apis)])
		}
		l, err := harness.NewClosed(addrs, len(addrs), 5*time.Second)
		if err != nil {
			closeLoops(loops)
			return nil, err
		}
		l.Depth = o.depth
		loops = append(loops, l)
	}
	return loops, nil
}

func closeLoops(loops []*harness.Closed) {
	for _, l := range loops {
		l.Close()
	}
}
