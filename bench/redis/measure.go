package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"
)

// result is one measurement.
type result struct {
	name      string
	conc      int
	keys      int
	ops       int // decisions: calls answered
	errs      int // calls that failed (a timeout, a connection error): in the latencies, not in ops
	secs      float64
	p50, p99  time.Duration
	redisCPU  float64 // fraction of one core
	clientCPU float64 // this process's CPU seconds (all goroutines) per decision
	allowedPc float64
}

func (r result) rate() float64 { return float64(r.ops) / r.secs }

// measure runs f from conc goroutines over keys for *dur. With pace > 0 the
// load is open-loop at pace requests/s in total; latency counts from each
// request's scheduled start when its worker is behind schedule (earlier
// calls were slow), else from when the call is made. A call that fails
// is counted in errs and its wait stays in the latencies: a timeout is
// the tail, and leaving it out would hide it.
func measure(name string, f func(string) (bool, error), keys []string, conc, pid int, pace float64) result {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, conc)
	allowed := make([]int, conc)
	errs := make([]int, conc)
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
				l = append(l, time.Since(t0))
				if err != nil {
					failed.Do(func() { fmt.Fprintf(os.Stderr, "%s: %v\n", name, err) })
					errs[w]++
					continue
				}
				if ok {
					allowed[w]++
				}
			}
			lats[w] = l
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := (procCPU(pid) - cpu0) / secs
	self := procCPU(os.Getpid()) - self0
	var all []time.Duration
	na, ne := 0, 0
	for w := range lats {
		all = append(all, lats[w]...)
		na += allowed[w]
		ne += errs[w]
	}
	slices.Sort(all)
	r := result{name: name, conc: conc, keys: len(keys), ops: len(all) - ne, errs: ne, secs: secs, redisCPU: cpu}
	if len(all) > 0 {
		r.clientCPU = self / float64(len(all))
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	if r.ops > 0 {
		r.allowedPc = 100 * float64(na) / float64(r.ops)
	}
	return r
}
