package main

import (
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func report(w io.Writer, o options, rs []result, rate float64, direct, proxy result, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "Load run %s, %d cores, wrk -t%d -c%d, %v per step, best of %d run(s) per step, everything on one machine over loopback.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), harness.NumCPU(), o.threads, o.conns, o.duration, o.runs)
	fmt.Fprintf(w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", loadBefore, loadAfter)
	fmt.Fprintln(w, "| step | requests/s | p50 | p99 | non-2xx | server CPU/request | its Redis's CPU/request |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for i, r := range rs {
		if o.proxyOnly && i >= stepCheck {
			break
		}
		redis := "–"
		if r.redisCPU >= 0 {
			redis = fmt.Sprintf("%.1f µs", float64(r.redisCPU)/float64(time.Microsecond))
		}
		fmt.Fprintf(w, "| %s | %.0f | %v | %v | %d | %.1f µs | %s |\n", r.name, r.rps, r.p50, r.p99, r.non2xx,
			float64(r.cpuPerRequest)/float64(time.Microsecond), redis)
	}
	fmt.Fprintln(w)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	sl, ngx := rs[stepSluice], rs[stepNginx]
	fmt.Fprintf(w, "- sluice proxy (memory store, one rule on every request) against nginx proxy_pass with limit_req: %.2f× its requests/s (target ≥ 0.9×), %.2f× its CPU per request (target ≤ 2×)\n",
		sl.rps/ngx.rps, us(sl.cpuPerRequest)/us(ngx.cpuPerRequest))
	fmt.Fprintf(w, "- sluice proxy against Caddy: %.2f× its requests/s; against a bare httputil.ReverseProxy: %.2f×, at %.2f× its CPU per request; against a minimal fasthttp proxy: %.2f×, at %.2f× its CPU per request\n",
		sl.rps/rs[stepCaddy].rps, sl.rps/rs[stepBare].rps, us(sl.cpuPerRequest)/us(rs[stepBare].cpuPerRequest),
		sl.rps/rs[stepFast].rps, us(sl.cpuPerRequest)/us(rs[stepFast].cpuPerRequest))
	fmt.Fprintf(w, "- proxy, memory store: %.0f%% of direct throughput; redis store: %.0f%%\n", 100*sl.rps/rs[0].rps, 100*rs[stepSluice+1].rps/rs[0].rps)
	if !o.proxyOnly {
		fmt.Fprintf(w, "- /v1/check, memory store: %.0f%% of the bare handler (target ≥ 70%%), %.1f µs server CPU per decision (target ≤ 25 µs) vs %.1f µs for the bare handler\n",
			100*rs[stepCheck+1].rps/rs[stepCheck].rps, us(rs[stepCheck+1].cpuPerRequest), us(rs[stepCheck].cpuPerRequest))
		fmt.Fprintf(w, "- /v1/check, redis store: %.0f%% of the bare handler\n", 100*rs[stepCheck+2].rps/rs[stepCheck].rps)
	}
	fmt.Fprintf(w, "- paced at half the proxy's peak (%.0f req/s asked; got %.0f direct, %.0f through the proxy): direct p50 %v p99 %v; proxy p50 %v p99 %v (%d non-2xx); the proxy adds %v at p99 (target < 1ms)\n",
		rate, direct.rps, proxy.rps, direct.p50, direct.p99, proxy.p50, proxy.p99, proxy.non2xx, proxy.p99-direct.p99)
}
