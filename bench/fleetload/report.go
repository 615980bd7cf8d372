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
	overUnix := ""
	if o.unix {
		overUnix = " Rows marked \"Unix socket\": 3 more `sluice serve` on the same Redis, listening on Unix sockets (`listen: unix:/PATH`), the same load on their sockets instead of loopback TCP, each cell right after its TCP twin."
	}
	fmt.Fprintf(w, "\n3 `sluice serve` on %s, POST /v1/check on %d keep-alive connections (spread evenly), %s, %v per cell after a 1s warm-up, best of %d; token_bucket; load average before %s, after %s; %d CPUs shared by the clients, the daemons and Redis.%s\n\n",
		redis, o.conc, inflight, o.duration, o.runs, loadBefore, harness.LoadAvg(), harness.NumCPU(), overUnix)
	fmt.Fprintln(w, "| mode | keys | load | decisions/s | ÷ plain (best) | ÷ plain in each run | admitted/s | daemon CPU µs/decision (3 summed) | Redis CPU µs/decision | client CPU µs/decision | all CPU µs/decision | plain's ÷ this (CPU) | Redis commands/decision |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	// CPU per decision of every process: what two busy cores divide.
	allCPU := func(r result) time.Duration { return r.daemonCPU + r.redisCPU + r.clientCPU }
	plainCPU := map[[3]int]time.Duration{}
	for i, c := range cells {
		if c.mode == "plain" {
			plainCPU[c.plainKey()] = allCPU(rs[i])
		}
	}
	plainOf := func(rs []result) map[[3]int]float64 {
		m := map[[3]int]float64{}
		for i, c := range cells {
			if c.mode == "plain" && i < len(rs) {
				m[c.plainKey()] = rs[i].rate
			}
		}
		return m
	}
	plain := plainOf(rs)
	plains := make([]map[[3]int]float64, len(all))
	for r := range all {
		plains[r] = plainOf(all[r])
	}
	for i, c := range cells {
		r := rs[i]
		ratio := "—"
		if p := plain[c.plainKey()]; p > 0 {
			ratio = fmt.Sprintf("%.2f×", r.rate/p)
		}
		opt := c.mode
		switch c.mode {
		case "sync":
			opt = "`sync: 100ms`"
		case "lease":
			opt = "`lease: auto`"
		}
		if c.unix {
			opt += ", Unix socket"
		}
		var each []string
		for run := range all {
			if p := plains[run][c.plainKey()]; p > 0 && i < len(all[run]) {
				each = append(each, fmt.Sprintf("%.2f×", all[run][i].rate/p))
			}
		}
		cpuRatio := "—"
		if p := plainCPU[c.plainKey()]; p > 0 && allCPU(r) > 0 {
			cpuRatio = fmt.Sprintf("%.2f×", float64(p)/float64(allCPU(r)))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %s | %.0f | %.1f | %.2f | %.1f | %.1f | %s | %.3f |\n",
			opt, c.keys, c.load(), r.rate, ratio, strings.Join(each, ", "), r.admitted, us(r.daemonCPU), us(r.redisCPU), us(r.clientCPU), us(allCPU(r)), cpuRatio, r.redisCmds)
	}
}

// plainKey identifies the plain cell c is divided by: the same keys, load
// and network.
func (c cell) plainKey() [3]int { return [3]int{c.keys, b2i(c.over), b2i(c.unix)} }

// reportUnix divides each Unix-socket cell's decisions/s by its TCP
// twin's (the same mode, keys and load), best against best and run by
// run.
func reportUnix(w io.Writer, cells []cell, rs []result, all [][]result) {
	tcp := map[cell]int{}
	for i, c := range cells {
		if !c.unix {
			tcp[c] = i
		}
	}
	header := false
	for i, c := range cells {
		j, ok := tcp[cell{mode: c.mode, keys: c.keys, over: c.over}]
		if !c.unix || !ok {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\n| mode | keys | load | TCP decisions/s | Unix socket decisions/s | Unix ÷ TCP (best) | Unix ÷ TCP in each run |")
			fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---|")
			header = true
		}
		var each []string
		for run := range all {
			if i < len(all[run]) && all[run][j].rate > 0 {
				each = append(each, fmt.Sprintf("%.2f×", all[run][i].rate/all[run][j].rate))
			}
		}
		ratio := "—"
		if rs[j].rate > 0 {
			ratio = fmt.Sprintf("%.2f×", rs[i].rate/rs[j].rate)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.0f | %s | %s |\n", c.mode, c.keys, c.load(), rs[j].rate, rs[i].rate, ratio, strings.Join(each, ", "))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
