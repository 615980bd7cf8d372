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
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
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
