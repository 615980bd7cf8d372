package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// The soft bound through the daemons: a per-minute fixed window under 10×
// overload, sync: 100ms, asked of the three daemons at an even pace
// through /v1/forward-auth (429 when refused), for boundRun from a fresh
// key inside one window.
const (
	boundLimit    = 1000
	boundSync     = 100 * time.Millisecond
	boundOverload = 10
	boundRun      = 10 * time.Second
)

// nominalBound is the most the fleet may admit past the limit, README's
// (n−1)/n · λ · (2·interval + RTT) with the RTT taken as 0: n instances
// sharing λ requests/s evenly, each missing the others' hits for at most
// two sync intervals.
func nominalBound(n int, lambda float64, interval time.Duration) float64 {
	return float64(n-1) / float64(n) * lambda * 2 * interval.Seconds()
}

// measureBound runs the bound measurement (key run) and returns the
// requests admitted, asked, and the largest p99 latency of the three.
func measureBound(ctx context.Context, apis []string, run int) (admitted, asked int64, p99 time.Duration, err error) {
	// Stay inside one minute's window: start at most 45 s into it.
	if now := time.Now(); now.Second() > 45 {
		wait := now.Truncate(time.Minute).Add(time.Minute + 500*time.Millisecond).Sub(now)
		fmt.Fprintf(os.Stderr, "  bound run %d: waiting %v for the next minute's window\n", run, wait.Round(time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		}
	}
	rate := float64(boundLimit*boundOverload) / 60 / float64(len(apis))
	var wg sync.WaitGroup
	results := make([]harness.PacedResult, len(apis))
	errs := make([]error, len(apis))
	for i, api := range apis {
		req := []byte(fmt.Sprintf("GET /v1/forward-auth HTTP/1.1\r\nHost: %s\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /bound\r\nX-Run: fleetload-%d-%d\r\n\r\n", api, os.Getpid(), run))
		wg.Go(func() {
			results[i], errs[i] = harness.Paced(ctx, harness.PacedOptions{Addr: api, Request: req, Rate: rate, Duration: boundRun, Conns: 4})
		})
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil && !errors.Is(errs[i], harness.ErrShortfall) {
			return 0, 0, 0, fmt.Errorf("bound, %s: %w", apis[i], errs[i])
		}
		if r.Errors > 0 {
			return 0, 0, 0, fmt.Errorf("bound, %s: %d requests failed: %v", apis[i], r.Errors, r.FirstErr)
		}
		admitted += r.Answered - r.Non2xx
		asked += r.Answered
		p99 = max(p99, r.P99)
	}
	return admitted, asked, p99, nil
}
