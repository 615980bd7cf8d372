package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestRawKeysNeverMeetNamespacedOnes: the store keeps a Limiter's
// namespace with each key as a 4-byte number starting with 0xFF; a
// request that writes those bytes itself, at the front of a key sent
// without a namespace or as a short namespace of its own, is another key
// (Namespace+Key differ), and must not spend the Limiter's count, in Take,
// TakeAll or Reset. One shard puts every key in one map.
func TestRawKeysNeverMeetNamespacedOnes(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, alg := range []struct {
		alg   sluice.Algorithm
		limit sluice.Limit
	}{
		{sluice.SlidingWindowLog, sluice.PerMinute(2)},
		{sluice.SlidingWindowCounter, sluice.PerMinute(2).WithSegments(2)},
		{sluice.TokenBucket, sluice.PerMinute(2)},
	} {
		for _, raw := range []struct{ ns, key string }{
			{"", "\xff\x00\x00\x01victim"},
			{"\xff\x00\x00\x01", "victim"},
			{"\xff", "\x00\x00\x01victim"},
		} {
			for _, how := range []string{"Take", "TakeAll"} {
				s := memstore.New(memstore.Options{Shards: 1})
				lim, err := sluice.NewLimiter(s, alg.alg, alg.limit)
				if err != nil {
					t.Fatal(err)
				}
				lim.AllowAt(ctx, "warm", now, 0) // the store numbers lim's namespace 1
				r := sluice.Request{Namespace: raw.ns, Key: raw.key, Algorithm: alg.alg, Limit: alg.limit, Cost: 2, Now: now}
				var d sluice.Decision
				if how == "Take" {
					d, err = s.Take(ctx, r)
				} else {
					other := r
					other.Key, other.Cost = "other", 1
					ds := make([]sluice.Decision, 2)
					err = s.TakeAll(ctx, []sluice.Request{r, other}, ds)
					d = ds[0]
				}
				if err != nil || !d.Allowed {
					t.Fatalf("%v, %s of %q+%q: %+v, %v; want allowed", alg.alg, how, raw.ns, raw.key, d, err)
				}
				if d, err := lim.AllowAt(ctx, "victim", now, 1); err != nil || !d.Allowed || d.Remaining != 1 {
					t.Errorf("%v: after %s spent %q+%q, the Limiter's key \"victim\": %+v, %v; want allowed, remaining 1", alg.alg, how, raw.ns, raw.key, d, err)
				}
				// Reset finds the raw key where Take put it.
				if err := s.Reset(ctx, r); err != nil {
					t.Fatal(err)
				}
				r.Cost = 0
				if d, err := s.Take(ctx, r); err != nil || d.Remaining != 2 {
					t.Errorf("%v: %q+%q after Reset: %+v, %v; want remaining 2", alg.alg, raw.ns, raw.key, d, err)
				}
			}
		}
	}
}
