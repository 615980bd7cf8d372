package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// A step on the Redis store shows the Redis server's CPU per request
// beside the daemon's: the daemon's alone is not what such a request
// costs.
func TestReportRedisCPU(t *testing.T) {
	rs := make([]result, stepCount)
	for i := range rs {
		rs[i] = fromWrk(harness.WrkResult{RPS: 1000, Requests: 1000, CPUPerRequest: []time.Duration{10 * time.Microsecond}})
		rs[i].name = "step"
	}
	rs[stepSluice+1] = fromWrk(harness.WrkResult{RPS: 1000, Requests: 1000, CPUPerRequest: []time.Duration{20 * time.Microsecond, 4400 * time.Nanosecond}})
	rs[stepSluice+1].name = "sluice proxy, redis store"
	var b strings.Builder
	report(&b, options{}, rs, 500, result{}, result{}, "0", "0")
	out := b.String()
	if !strings.Contains(out, "| sluice proxy, redis store | 1000 | 0s | 0s | 0 | 20.0 µs | 4.4 µs |") {
		t.Errorf("no Redis CPU on the redis row:\n%s", out)
	}
	if !strings.Contains(out, "| step | 1000 | 0s | 0s | 0 | 10.0 µs | – |") {
		t.Errorf("a row without Redis should show none:\n%s", out)
	}
}
