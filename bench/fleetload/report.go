package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

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
