package server_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
)

// TestShouldRateLimitAllocations: a request of one descriptor admitted by
// its warm counter in memory makes two allocations: its store key, and
// the response with its status and the status's messages. The response,
// its statuses' slice, each status, its limit and its reset were one each,
// and the engine made two more of its own (see engine's
// TestDecideDescriptorsAllocations).
func TestShouldRateLimitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	set := writeConf(t, "domain: d\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
	m := metrics.New(prometheus.NewRegistry())
	eng, err := engine.New(engine.Options{Store: newStore(t, "memory"), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	rls, err := server.NewRLS(server.RLSOptions{Engine: func() *engine.Engine { return eng }, Descriptors: func() *descriptors.Set { return set }, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("key", "k")}}
	ctx := context.Background()
	var r *rlsv3.RateLimitResponse
	call := func() {
		if r, err = rls.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	call() // the counter's first take makes it
	allocs := testing.AllocsPerRun(1000, call)
	if r.OverallCode != rlsv3.RateLimitResponse_OK || len(r.Statuses) != 1 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000000000 || r.Statuses[0].DurationUntilReset.GetSeconds() != 1 {
		t.Fatalf("response %v, want OK with the descriptor's limit and a reset in 1 s", r)
	}
	if allocs > 2 {
		t.Errorf("%v allocations per request, want at most 2", allocs)
	}
}
