package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func report(o options, rows []row) {
	fmt.Printf("\n%d cells of %v each (after a warm-up), %d gRPC connections, the %s client, load average after: %s, %d CPUs shared by client, servers and Redis.\n\n",
		len(rows), o.duration, o.conns, strings.Join(o.clients, " and the "), harness.LoadAvg(), harness.NumCPU())
	// Ratios are taken within one client.
	type cell struct {
		conc, keys int
		client     string
	}
	floor := map[cell]row{}
	ref := map[cell]row{}
	for _, r := range rows {
		if strings.HasPrefix(r.target, "bare grpc-go (floor)") {
			floor[cell{r.conc, r.keys, r.client}] = r
		}
		if strings.HasPrefix(r.target, "reference") {
			ref[cell{r.conc, r.keys, r.client}] = r
		}
	}
	fmt.Println("| server | concurrency | keys | decisions/s | ÷ reference | p50 ms | p99 ms | server CPU µs/decision | CPU ÷ floor | Redis CPU µs/decision | client CPU µs/call | Redis script calls/decision | Redis commands/decision |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		ratio := "—"
		if f, ok := floor[cell{r.conc, r.keys, r.client}]; ok && f.cpu > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(r.cpu)/float64(f.cpu))
		}
		vsRef := "—"
		if f, ok := ref[cell{r.conc, r.keys, r.client}]; ok && f.rate > 0 {
			vsRef = fmt.Sprintf("%.2f×", r.rate/f.rate)
		}
		calls, cmds, rcpu := "—", "—", "—"
		if r.redisCmds >= 0 {
			calls, cmds = fmt.Sprintf("%.2f", r.redisCalls), fmt.Sprintf("%.2f", r.redisCmds)
		}
		if r.redisCPU >= 0 {
			rcpu = fmt.Sprintf("%.1f", us(r.redisCPU))
		}
		fmt.Printf("| %s | %d | %d | %.0f | %s | %.2f | %.2f | %.1f | %s | %s | %.1f | %s | %s |\n",
			r.target, r.conc, r.keys, r.rate, vsRef, ms(r.p50), ms(r.p99), us(r.cpu), ratio, rcpu, us(r.clientCPU), calls, cmds)
	}
}
