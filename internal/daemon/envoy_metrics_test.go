package daemon

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyMetricsTruth drives the Envoy service with a seeded random mix
// of descriptors and hits_addend, over two limits and a shadow_mode one,
// and keeps a model of the counters (a request over the limit consumes
// nothing; a shadow descriptor over its limit denies nothing and is not
// charged). Each answer must be the model's, and at the end each Envoy
// counter what the model counted: hits asked for, hits over the limit,
// hits a shadow descriptor would have denied, and admitted hits that
// landed in the last 20% of a limit (above floor(0.8 × limit)).
func TestEnvoyMetricsTruth(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(`domain: t
descriptors:
  - key: a
    rate_limit: {unit: year, requests_per_unit: 12}
  - key: b
    rate_limit: {unit: year, requests_per_unit: 30}
  - key: s
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 10}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc: {listen: 127.0.0.1:0, config: [rl.yaml]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := dialEnvoy(t, startDaemonFile(t, path))

	type desc struct {
		key    string
		limit  int64
		shadow bool
	}
	all := []desc{{"a", 12, false}, {"b", 30, false}, {"s", 10, true}}
	count := map[string]int64{}
	type tally struct{ hits, over, shadow, near int64 }
	want := map[string]*tally{"a": {}, "b": {}, "s": {}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 120 {
		var ds []desc
		var costs []int64
		var req []*commonv3.RateLimitDescriptor
		for _, d := range all {
			if rng.IntN(2) == 0 {
				continue
			}
			c := int64(1 + rng.IntN(2))
			ds, costs = append(ds, d), append(costs, c)
			e := entries(d.key, "v")
			e.HitsAddend = wrapperspb.UInt64(uint64(c))
			req = append(req, e)
		}
		if len(ds) == 0 {
			continue
		}
		resp, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "t", Descriptors: req})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		overAny := false
		over := make([]bool, len(ds))
		for j, d := range ds {
			over[j] = count[d.key]+costs[j] > d.limit
			overAny = overAny || over[j] && !d.shadow
		}
		if got := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT; got != overAny {
			t.Fatalf("request %d %v (costs %v, counts %v): over the limit %v, want %v", i, ds, costs, count, got, overAny)
		}
		for j, d := range ds {
			w := want[d.key]
			w.hits += costs[j]
			switch {
			case over[j] && d.shadow:
				w.shadow += costs[j]
			case over[j]:
				w.over += costs[j]
			case !overAny:
				count[d.key] += costs[j]
				if th := d.limit * 8 / 10; count[d.key] > th {
					w.near += min(costs[j], count[d.key]-th)
				}
			}
		}
	}
	for key, w := range want {
		for _, c := range []struct {
			name string
			want int64
		}{
			{"sluice_envoy_hits_total", w.hits},
			{"sluice_envoy_over_limit_total", w.over},
			{"sluice_envoy_shadow_mode_total", w.shadow},
			{"sluice_envoy_near_limit_total", w.near},
		} {
			if got := ed.metric(c.name, "domain", "t", "descriptor", key); got != float64(c.want) {
				t.Errorf("%s{descriptor=%q} = %v, want %d", c.name, key, got, c.want)
			}
		}
	}
}
