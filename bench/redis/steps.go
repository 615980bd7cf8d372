package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

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

var usecRE = regexp.MustCompile(`cmdstat_evalsha:[^\r\n]*usec_per_call=([0-9.]+)`)
