package daemon

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyNegativeHitsShardedExact: the daemon gives a sharded
// descriptor's negative hits back where they were counted. A hit taken on
// one of 3 shards (10 of 30 each), then given back when it is another
// shard's turn, used to go to that shard, which counted nothing: the hit
// stayed counted on the first, and one of the three checks after it said
// 27 left. Every check must say 30.
func TestEnvoyNegativeHitsShardedExact(t *testing.T) {
	ed, _ := startEnvoyRedis(t, t.TempDir(), `domain: fleet
descriptors:
  - key: sharded
    shards: 3
    rate_limit: {unit: year, requests_per_unit: 30}
`)
	ask := func(hits uint64, negative bool) *rlsv3.RateLimitResponse {
		t.Helper()
		d := entries("sharded", "a")
		d.HitsAddend = wrapperspb.UInt64(hits)
		d.IsNegativeHits = negative
		r := ed.ask("fleet", d)
		if r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%d hits (negative %v): %v; want OK", hits, negative, r.OverallCode)
		}
		return r
	}
	ask(1, false)
	ask(1, true)
	for i := range 3 {
		if got := ask(0, false).Statuses[0].LimitRemaining; got != 30 {
			t.Errorf("check %d after the hit was given back: %d left, want 30 (every shard empty)", i+1, got)
		}
	}
}
