package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// report prints the tables; lat holds the paced runs at half of the
// with-Sluice peak without and with Sluice, the same at a quarter, then
// the single-connection runs without and with.
func report(w io.Writer, o options, best [3]result, rate float64, lat [6]result, loadBefore, loadAfter string) {
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
	row(best[2].name, best[2])
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
	fmt.Fprintf(w, "- over a Unix socket: %.0f req/s, %.2f× the %.0f over TCP loopback (%.0f%% of nginx's own); CPU per request nginx %.1f µs and Sluice %.1f µs, over TCP %.1f µs and %.1f µs\n",
		best[2].rps, best[2].rps/best[1].rps, best[1].rps, 100*best[2].rps/best[0].rps,
		us(best[2].cpuPerRequest[0]), us(best[2].cpuPerRequest[1]), us(best[1].cpuPerRequest[0]), us(best[1].cpuPerRequest[1]))
	added := func(name string, r float64, a, b result) {
		fmt.Fprintf(w, "- paced at %s (%.0f req/s asked; got %.0f without, %.0f with): Sluice adds %v at p50, %v at p90, %v at p99 and %v at p99.9 (from the send: %v at p50, %v at p99); CPU pressure %.0f%% → %.0f%%\n",
			name, r, a.rps, b.rps, round(b.p50-a.p50), round(b.paced.P90-a.paced.P90), round(b.p99-a.p99), round(b.paced.P999-a.paced.P999),
			round(b.paced.SentP50-a.paced.SentP50), round(b.paced.SentP99-a.paced.SentP99), 100*a.paced.CPUPressure, 100*b.paced.CPUPressure)
	}
	if o.rate > 0 {
		added(fmt.Sprintf("%.0f/s (-paced-rate; half of this run's with-Sluice peak would be %.0f/s)", rate, best[1].rps/2), rate, pw, pa)
		added("half of it", rate/2, qw, qa)
	} else {
		added("half of the with-Sluice peak (target < 1ms at p99)", rate, pw, pa)
		added("a quarter of it", rate/2, qw, qa)
	}
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
	}{{fmt.Sprintf("%.0f/s", rate), pw, pa}, {fmt.Sprintf("%.0f/s", rate/2), qw, qa}} {
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
