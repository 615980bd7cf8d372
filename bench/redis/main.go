// Command redisbench measures the Redis store against a local redis-server
// it starts itself: decisions per second, p50/p99 latency and Redis CPU at
// several concurrencies, on one hot key and on 100,000 keys, compared in the
// same run with github.com/go-redis/redis_rate/v10 (GCRA, one Lua call per
// decision) and with the ceiling redis-benchmark reports for a trivial
// EVALSHA. It also compares the two Go clients (rueidis, go-redis) on the
// same EVALSHA of Sluice's script. It is a separate module so that its peers
// never become dependencies of Sluice.
//
//	cd bench/redis && go run . -d 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

var (
	dur      = flag.Duration("d", 2*time.Second, "duration of each measurement")
	concList = flag.String("c", "1,16,64,256", "concurrencies")
	nkeys    = flag.Int("keys", 100_000, "size of the wide key space")
	only     = flag.String("clients", "", "run only the client-choice rows whose name contains this")
	skip     = flag.Bool("clients-only", false, "stop after the client-choice table")
	usecN    = flag.Int("n", 100_000, "decisions per cell of the time-inside-Redis table")
	usecReps = flag.Int("reps", 3, "repetitions of each time-inside-Redis cell (the median is printed)")
	usecOnly = flag.Bool("usec-only", false, "run only the time-inside-Redis table")
	vsOnly   = flag.Bool("vs-only", false, "run only Sluice vs redis_rate and the latency at half of peak (steps 3 and 4)")
	paceOnly = flag.Float64("pace", 0, "run only a paced Sluice cell at this many decisions/s (64 workers, wide key space), after filling the keys")
)

// result is one measurement.
type result struct {
	name      string
	conc      int
	keys      int
	ops       int
	secs      float64
	p50, p99  time.Duration
	redisCPU  float64 // fraction of one core
	clientCPU float64 // this process's CPU seconds (all goroutines) per decision
	allowedPc float64
}

func (r result) rate() float64 { return float64(r.ops) / r.secs }

func main() {
	flag.Parse()
	concs := parseInts(*concList)
	port, pid, stop := startRedis()
	defer stop()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx := context.Background()

	keys := make([]string, *nkeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	hot := []string{"hot"}

	store, err := redisstore.New(ctx, redisstore.Options{Addrs: []string{addr}, Timeout: 5 * time.Second})
	must(err)
	defer store.Close()
	// The store as it was before calls alone got a connection of their
	// own: every call pipelined.
	storePiped, err := redisstore.New(ctx, redisstore.Options{Addrs: []string{addr}, Timeout: 5 * time.Second, AlwaysPipeline: true})
	must(err)
	defer storePiped.Close()
	gr := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 2 * slices.Max(concs)})
	defer gr.Close()
	rl := redis_rate.NewLimiter(gr)
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true, AlwaysPipelining: true})
	must(err)
	defer ru.Close()
	// The same with the writer pausing up to 20µs to gather more commands
	// per write (fewer syscalls on both ends, for some latency).
	ruDelay, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true, AlwaysPipelining: true, MaxFlushDelay: 20 * time.Microsecond})
	must(err)
	defer ruDelay.Close()
	// Without AlwaysPipelining: a lone call takes rueidis' synchronous
	// path (written and read on the caller's goroutine).
	ruSync, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	must(err)
	defer ruSync.Close()

	// A limit nothing reaches, so both libraries do the same (admitting) work.
	limit := sluice.PerSecond(1_000_000_000)
	now := time.Now()
	sluiceTake := func(k string) (bool, error) {
		d, err := store.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.GCRA, Limit: limit, Cost: 1, Now: now.Add(time.Since(now))})
		return d.Allowed, err
	}
	sluicePiped := func(k string) (bool, error) {
		d, err := storePiped.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.GCRA, Limit: limit, Cost: 1, Now: now.Add(time.Since(now))})
		return d.Allowed, err
	}
	rrLimit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Second}
	redisRate := func(k string) (bool, error) {
		r, err := rl.Allow(ctx, k, rrLimit)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}

	fmt.Printf("# redis-server %s on %s, GOMAXPROCS %d, %v per cell\n\n", redisVersion(), addr, runtimeProcs(), *dur)

	if *paceOnly > 0 {
		// Fill the key space first, as the full run's earlier steps do.
		measure("fill", sluiceTake, keys, 64, pid, 0)
		measure("fill", redisRate, keys, 64, pid, 0)
		header()
		for _, impl := range []struct {
			name string
			f    func(string) (bool, error)
		}{{"sluice paced", sluiceTake}, {"sluice always pipelined paced", sluicePiped}, {"redis_rate paced", redisRate}} {
			e0 := expiryStats(addr)
			printRow(measure(impl.name, impl.f, keys, 64, pid, *paceOnly))
			e1 := expiryStats(addr)
			fmt.Printf("(keys expired during the cell: %d; expiry cycles that hit their time cap: %d)\n", e1[0]-e0[0], e1[1]-e0[1])
		}
		return
	}

	var ceil1, ceil16 float64
	if !*vsOnly {
		ceil1, ceil16 = steps012(ctx, addr, port, pid, store, redisRate, keys, hot, now, limit, clients{ru, ruDelay, ruSync, gr})
		if *usecOnly || *skip {
			return
		}
	}

	// 3. Sluice vs redis_rate.
	fmt.Println("\n## Sluice redisstore (GCRA) vs redis_rate v10 (GCRA)")
	header()
	peak := map[string]result{}
	for _, ks := range [][]string{hot, keys} {
		for _, c := range concs {
			for _, impl := range []struct {
				name string
				f    func(string) (bool, error)
			}{{"sluice", sluiceTake}, {"sluice always pipelined", sluicePiped}, {"redis_rate", redisRate}} {
				r := measure(impl.name, impl.f, ks, c, pid, 0)
				printRow(r)
				if c == 64 && len(ks) > 1 {
					peak[impl.name] = r
				}
				if p, ok := peak[impl.name+"/max"]; !ok || r.rate() > p.rate() {
					peak[impl.name+"/max"] = r
				}
				if p, ok := peak[impl.name+"/wide"]; len(ks) > 1 && (!ok || r.rate() > p.rate()) {
					peak[impl.name+"/wide"] = r
				}
			}
		}
	}

	// 4. Latency at half of peak throughput (open loop, 64 workers).
	// Half of the peak of the same workload (the wide key space): the hot
	// key runs faster, and half of its peak can be most of the wide peak.
	fmt.Println("\n## Latency at half of Sluice's peak throughput on the wide key space (paced, 64 workers)")
	header()
	half := peak["sluice/wide"].rate() / 2
	e0 := expiryStats(addr)
	hr := measure("sluice @½peak", sluiceTake, keys, 64, pid, half)
	printRow(hr)
	e1 := expiryStats(addr)
	fmt.Printf("(keys expired during the cell: %d; Redis expiry cycles that hit their time cap: %d)\n", e1[0]-e0[0], e1[1]-e0[1])
	// The same pace for the others, in the same run.
	printRow(measure("sluice always pipelined @½peak", sluicePiped, keys, 64, pid, half))
	printRow(measure("redis_rate @½peak", redisRate, keys, 64, pid, half))

	s64, r64 := peak["sluice"], peak["redis_rate"]
	fmt.Println("\n## Targets")
	fmt.Printf("sluice / redis_rate at c=64, 100k keys: %.2f× (target ≥ 1.5×)\n", s64.rate()/r64.rate())
	fmt.Printf("sluice peak / redis-benchmark -P 1 ceiling: %.0f%% (target ≥ 70%%)\n", 100*peak["sluice/max"].rate()/ceil1)
	fmt.Printf("sluice peak / redis-benchmark -P 16 ceiling: %.0f%%\n", 100*peak["sluice/max"].rate()/ceil16)
	fmt.Printf("p99 at half of peak (%.0f/s): %v (target < 5ms)\n", half, hr.p99)
}

// clients are the bare clients of the client-choice table.
type clients struct {
	ru, ruDelay, ruSync rueidis.Client
	gr                  *goredis.Client
}

// steps012 runs steps 0 (time inside Redis), 1 (client choice) and 2 (the
// redis-benchmark ceiling, returned).
func steps012(ctx context.Context, addr string, port, pid int, store *redisstore.Store, redisRate func(string) (bool, error), keys, hot []string, now time.Time, limit sluice.Limit, cl clients) (ceil1, ceil16 float64) {
	ru, ruDelay, ruSync, gr := cl.ru, cl.ruDelay, cl.ruSync, cl.gr
	// 0. Time inside Redis per decision, per algorithm and for redis_rate.
	usecTable(addr, store, redisRate, keys, hot, now)
	if *usecOnly {
		return 0, 0
	}

	// 1. Client choice: the same EVALSHA of Sluice's GCRA script.
	script := redisstore.Script(sluice.GCRA)
	tk, _ := limit.Ticks()
	argsFor := func() []string {
		// As redisstore's Take (take_head.lua, take_gcra.lua): now, tick,
		// margin; Rate, room (Burst-1)*Period, Cost*Period.
		return []string{strconv.FormatInt(time.Now().UnixMicro(), 10), strconv.FormatInt(tk.Tick, 10), "10000",
			strconv.FormatInt(tk.Rate, 10), strconv.FormatInt((tk.Burst-1)*tk.Period, 10), strconv.FormatInt(tk.Period, 10)}
	}
	// The script replies with the state it read: nil for a new key.
	nilOK := func(err error) (bool, error) {
		if rueidis.IsRedisNil(err) || err == goredis.Nil {
			err = nil
		}
		return err == nil, err
	}
	ruLua := rueidis.NewLuaScript(script)
	grLua := goredis.NewScript(script)
	clientFns := []struct {
		name string
		f    func(k string) (bool, error)
	}{
		{"rueidis EVALSHA", func(k string) (bool, error) {
			return nilOK(ruLua.Exec(ctx, ru, []string{"sluice:{" + k + "}"}, argsFor()).Error())
		}},
		{"rueidis EVALSHA, 50ms ctx", func(k string) (bool, error) {
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return nilOK(ruLua.Exec(c, ru, []string{"sluice:{" + k + "}"}, argsFor()).Error())
		}},
		{"rueidis EVALSHA, MaxFlushDelay 20µs", func(k string) (bool, error) {
			return nilOK(ruLua.Exec(ctx, ruDelay, []string{"sluice:{" + k + "}"}, argsFor()).Error())
		}},
		{"rueidis EVALSHA, sync path", func(k string) (bool, error) {
			return nilOK(ruLua.Exec(ctx, ruSync, []string{"sluice:{" + k + "}"}, argsFor()).Error())
		}},
		{"rueidis EVALSHA, sync path, 50ms ctx", func(k string) (bool, error) {
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return nilOK(ruLua.Exec(c, ruSync, []string{"sluice:{" + k + "}"}, argsFor()).Error())
		}},
		{"go-redis EVALSHA", func(k string) (bool, error) {
			a := argsFor()
			args := make([]any, len(a))
			for i := range a {
				args[i] = a[i]
			}
			return nilOK(grLua.Run(ctx, gr, []string{"sluice:{" + k + "}"}, args...).Err())
		}},
	}
	fmt.Println("\n## Client choice: the same EVALSHA (Sluice's GCRA script), wide key space")
	header()
	for _, c := range []int{1, 16, 64} {
		for _, cf := range clientFns {
			if *only != "" && !strings.Contains(cf.name, *only) {
				continue
			}
			printRow(measure(cf.name, cf.f, keys, c, pid, 0))
		}
	}

	if *skip {
		return 0, 0
	}

	// 2. The ceiling: redis-benchmark on a trivial EVALSHA.
	fmt.Println("\n## Ceiling: redis-benchmark, EVALSHA of `return 1`, 64 clients")
	sha, err := redistest.Do(addr, "SCRIPT", "LOAD", "return 1")
	must(err)
	ceil1 = redisBenchmark(port, sha, 1)
	ceil16 = redisBenchmark(port, sha, 16)
	fmt.Printf("redis-benchmark -c 64 -P 1:  %.0f requests/s\nredis-benchmark -c 64 -P 16: %.0f requests/s\n", ceil1, ceil16)

	return ceil1, ceil16
}

// usecTable prints the time Redis spends per decision (INFO commandstats,
// usec_per_call of EVALSHA: CPU time inside Redis, robust to a noisy
// machine), for each of Sluice's algorithms and for redis_rate, at
// concurrency 64 on the wide key space and on one hot key: the median of
// -reps runs of -n decisions each.
func usecTable(addr string, store *redisstore.Store, redisRate func(string) (bool, error), keys, hot []string, t0 time.Time) {
	ctx := context.Background()
	limit := sluice.PerSecond(1_000_000_000)
	type impl struct {
		name string
		f    func(string) (bool, error)
	}
	var impls []impl
	for _, a := range sluice.Algorithms() {
		// One algorithm per key: each algorithm has its own key space.
		pre := a.String() + "/"
		impls = append(impls, impl{"sluice " + a.String(), func(k string) (bool, error) {
			d, err := store.Take(ctx, sluice.Request{Key: pre + k, Algorithm: a, Limit: limit, Cost: 1, Now: t0.Add(time.Since(t0))})
			return d.Allowed, err
		}})
	}
	impls = append(impls, impl{"redis_rate", redisRate})
	fmt.Printf("## Time inside Redis per decision (EVALSHA usec_per_call, c=64, median of %d × %d decisions)\n", *usecReps, *usecN)
	fmt.Println("| impl | µs, 100,000 keys | µs, hot key | ratio to redis_rate (100k / hot) |")
	fmt.Println("|---|---:|---:|---:|")
	med := make(map[string][2]float64)
	for _, im := range impls {
		var v [2]float64
		for ki, ks := range [][]string{keys, hot} {
			var runs []float64
			for range *usecReps {
				runs = append(runs, usecPerCall(addr, im.f, ks, 64, *usecN))
			}
			slices.Sort(runs)
			v[ki] = runs[len(runs)/2]
		}
		med[im.name] = v
	}
	rr := med["redis_rate"]
	for _, im := range impls {
		v := med[im.name]
		fmt.Printf("| %s | %.2f | %.2f | %.2f / %.2f |\n", im.name, v[0], v[1], v[0]/rr[0], v[1]/rr[1])
	}
}

// usecPerCall resets Redis' statistics, makes n calls of f from conc
// goroutines over keys, and returns EVALSHA's usec_per_call.
func usecPerCall(addr string, f func(string) (bool, error), keys []string, conc, n int) float64 {
	_, err := redistest.Do(addr, "CONFIG", "RESETSTAT")
	must(err)
	var wg sync.WaitGroup
	var failed sync.Once
	for w := range conc {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := w; i < n; i += conc {
				if _, err := f(keys[rng.IntN(len(keys))]); err != nil {
					failed.Do(func() { fmt.Fprintln(os.Stderr, err) })
				}
			}
		})
	}
	wg.Wait()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	must(err)
	m := usecRE.FindStringSubmatch(info)
	if m == nil {
		fmt.Fprintf(os.Stderr, "no EVALSHA in INFO commandstats: %s\n", info)
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// expiryStats returns INFO stats' expired_keys and
// expired_time_cap_reached_count: Redis' active expiry runs on its one
// thread, and a cycle that hits its cap blocked it for up to 25ms.
func expiryStats(addr string) [2]int64 {
	info, err := redistest.Do(addr, "INFO", "stats")
	must(err)
	var v [2]int64
	for i, f := range []string{"expired_keys:", "expired_time_cap_reached_count:"} {
		if j := strings.Index(info, f); j >= 0 {
			rest := info[j+len(f):]
			if k := strings.IndexAny(rest, "\r\n"); k >= 0 {
				rest = rest[:k]
			}
			v[i], _ = strconv.ParseInt(rest, 10, 64)
		}
	}
	return v
}

var usecRE = regexp.MustCompile(`cmdstat_evalsha:[^\r\n]*usec_per_call=([0-9.]+)`)

// measure runs f from conc goroutines over keys for *dur. With pace > 0 the
// load is open-loop at pace requests/s in total; latency counts from each
// request's scheduled start when its worker is behind schedule (earlier
// calls were slow), else from when the call is made.
func measure(name string, f func(string) (bool, error), keys []string, conc, pid int, pace float64) result {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, conc)
	allowed := make([]int, conc)
	cpu0 := procCPU(pid)
	self0 := procCPU(os.Getpid())
	start := time.Now()
	end := start.Add(*dur)
	var failed sync.Once
	for w := range conc {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			l := make([]time.Duration, 0, 1<<16)
			var interval time.Duration
			next := start
			if pace > 0 {
				interval = time.Duration(float64(conc) / pace * float64(time.Second))
				next = start.Add(time.Duration(rng.Int64N(int64(interval) + 1)))
			}
			for {
				t0 := time.Now()
				if pace > 0 {
					if next.After(t0) {
						// On time: latency counts from when the call is
						// made, not from the schedule, because Go's timers
						// wake a sleeper up to a millisecond or more late
						// here (that is the load generator, not the store).
						time.Sleep(next.Sub(t0))
						t0 = time.Now()
					} else {
						// Behind schedule because earlier calls were slow:
						// that wait is the store's, so it counts.
						t0 = next
					}
					next = next.Add(interval)
				}
				if t0.After(end) {
					break
				}
				ok, err := f(keys[rng.IntN(len(keys))])
				if err != nil {
					failed.Do(func() { fmt.Fprintf(os.Stderr, "%s: %v\n", name, err) })
					continue
				}
				if ok {
					allowed[w]++
				}
				l = append(l, time.Since(t0))
			}
			lats[w] = l
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := (procCPU(pid) - cpu0) / secs
	self := procCPU(os.Getpid()) - self0
	var all []time.Duration
	na := 0
	for w := range lats {
		all = append(all, lats[w]...)
		na += allowed[w]
	}
	slices.Sort(all)
	r := result{name: name, conc: conc, keys: len(keys), ops: len(all), secs: secs, redisCPU: cpu}
	if len(all) > 0 {
		r.clientCPU = self / float64(len(all))
	}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
		r.allowedPc = 100 * float64(na) / float64(len(all))
	}
	return r
}

func header() {
	fmt.Println("| impl | conc | keys | decisions/s | p50 | p99 | Redis CPU | client CPU/decision |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
}

func printRow(r result) {
	fmt.Printf("| %s | %d | %d | %.0f | %v | %v | %.0f%% | %.1fµs |\n", r.name, r.conc, r.keys, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), 100*r.redisCPU, 1e6*r.clientCPU)
}

// startRedis starts a redis-server on a free loopback port, bounded: it is
// killed when the benchmark ends.
func startRedis() (port, pid int, stop func()) {
	dir, err := os.MkdirTemp("", "redisbench")
	must(err)
	port = 30000 + rand.IntN(20000)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "log"))
	must(cmd.Start())
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := redistest.Do("127.0.0.1:"+strconv.Itoa(port), "PING"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			fmt.Fprintln(os.Stderr, "redis-server did not start; run scripts/ensure-redis.sh")
			os.Exit(1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return port, cmd.Process.Pid, stop
}

// procCPU returns the user+system CPU seconds of process pid.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

func redisBenchmark(port int, sha string, pipeline int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-benchmark", "-p", strconv.Itoa(port), "-c", "64", "-n", "400000", "-P", strconv.Itoa(pipeline), "-q", "EVALSHA", sha, "0").CombinedOutput()
	must(err)
	m := rpsRE.FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		fmt.Fprintf(os.Stderr, "redis-benchmark: %s\n", out)
		return 0
	}
	v, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
	return v
}

func redisVersion() string {
	cmd := exec.Command("redis-server", "--version")
	b, _ := cmd.Output()
	f := strings.Fields(string(b))
	for _, x := range f {
		if strings.HasPrefix(x, "v=") {
			return x[2:]
		}
	}
	return "?"
}

func parseInts(s string) []int {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		must(err)
		out = append(out, n)
	}
	return out
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
