package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

type result struct {
	name          string
	rps           float64
	requests      int64
	non2xx        int64
	p50, p99      time.Duration
	cpuPerRequest []time.Duration // per server process, in the order given
	paced         *harness.PacedResult
	short         bool            // paced, and short of the asked rate by more than 3 %
	gcs           int             // paced: Sluice's garbage collections during the step
	waits         []time.Duration // paced: run-queue waits of the generator, nginx, Sluice, the upstream
	upCPU         time.Duration   // paced: the upstream's CPU per request
}

// lowerTail reports whether latency step r is a better run than best (the
// zero result if none yet): one at the asked rate before one short of it,
// then the lower p99. A run is kept whole, its other figures with it.
func lowerTail(r, best result) bool {
	if best.requests == 0 || best.short != r.short {
		return best.requests == 0 || !r.short
	}
	return r.p99 < best.p99
}

// runqueueWaits reads harness.RunqueueWait of each process (0 if
// unreadable).
func runqueueWaits(pids []int) []time.Duration {
	w := make([]time.Duration, len(pids))
	for i, pid := range pids {
		w[i], _ = harness.RunqueueWait(pid)
	}
	return w
}

// wrk runs one closed-loop step and reads the servers' CPU time around it.
func wrk(ctx context.Context, o options, url, script string, servers []*harness.Proc) (result, error) {
	w, err := harness.Wrk(ctx, o.threads, o.conns, o.duration, url, script, servers...)
	return fromWrk(w), err
}

// paced sends GET / to the host of url open loop at rate requests/s
// (harness.Paced), the connection pool sized for the rate.
func paced(ctx context.Context, o options, url string, rate float64, servers []*harness.Proc) (result, error) {
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	p, err := harness.Paced(ctx, harness.PacedOptions{Addr: host, Request: harness.GetRequest(host, "/"), Rate: rate, Duration: o.duration}, servers...)
	if err != nil && !errors.Is(err, harness.ErrShortfall) {
		return result{}, err
	}
	if p.Errors > 0 {
		return result{}, fmt.Errorf("%s: %d of %d paced requests failed: %v", url, p.Errors, p.Sent, p.FirstErr)
	}
	return result{rps: p.Achieved, requests: p.Answered, non2xx: p.Non2xx, p50: p.P50, p99: p.P99, cpuPerRequest: p.ServerCPU, paced: &p}, err
}

func fromWrk(w harness.WrkResult) result {
	return result{rps: w.RPS, requests: w.Requests, non2xx: w.Non2xx, p50: w.P50, p99: w.P99, cpuPerRequest: w.CPUPerRequest}
}
