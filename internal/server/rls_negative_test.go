package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestNegativeHits: a descriptor with is_negative_hits gives its
// hits_addend back to its limit's counter (never below zero), is answered
// OK whatever the counter says, and is counted in
// sluice_envoy_negative_hits_total, not in sluice_envoy_hits_total; as in
// the reference service. It gives back even when another descriptor
// refuses the request. Over memory and Redis.
func TestNegativeHits(t *testing.T) {
	srv := redistest.StartServer(t)
	rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second, Prefix: fmt.Sprintf("neg%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	for _, st := range []struct {
		name string
		s    sluice.Store
	}{{"memory", memstore.New(memstore.Options{})}, {"redis", rs}} {
		t.Run(st.name, func(t *testing.T) {
			e := startRLS(t, st.s, writeConf(t, plainConf), envOpts{})
			back := func(n uint64) *descriptorPB {
				d := withHits(desc("user", "ann"), n)
				d.IsNegativeHits = true
				return d
			}
			e.expect(t, "ann to the limit", []string{"O:O", "O:O", "X:X"}, "web", desc("user", "ann"))
			r := e.call(t, "web", 0, back(1))
			if codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("a negative hit at the limit: %s, remaining %d; want O:O, remaining 1", codesOf(r), r.Statuses[0].LimitRemaining)
			}
			e.expect(t, "ann after one hit given back", []string{"O:O", "X:X"}, "web", desc("user", "ann"))
			// More than counted: the counter goes to 0, no lower.
			if r := e.call(t, "web", 0, back(5)); codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 2 {
				t.Fatalf("5 negative hits on 2 counted: %s, remaining %d; want O:O, remaining 2", codesOf(r), r.Statuses[0].LimitRemaining)
			}
			e.expect(t, "ann after all given back", []string{"O:O", "O:O", "X:X"}, "web", desc("user", "ann"))
			// Beside a descriptor over its limit: the request is refused,
			// the negative one answered OK and given back all the same.
			e.expect(t, "bob to the limit", []string{"O:O", "O:O", "X:X"}, "web", desc("user", "bob"))
			if r := e.call(t, "web", 0, desc("user", "bob"), back(1)); codesOf(r) != "X:XO" {
				t.Fatalf("a negative hit beside an over-limit descriptor: %s, want X:XO", codesOf(r))
			}
			e.expect(t, "ann after that", []string{"O:O", "X:X"}, "web", desc("user", "ann"))
			m := metricstest.Gather(t, e.reg)
			if got := m[`sluice_envoy_negative_hits_total{descriptor="user",domain="web"}`]; got != 7 {
				t.Errorf("negative hits counted %v, want 7 (1 + 5 + 1)", got)
			}
			if got := m[`sluice_envoy_hits_total{descriptor="user",domain="web"}`]; got != 14 {
				t.Errorf("hits counted %v, want 14 (the positive ones only: ann's 10, bob's 4)", got)
			}
		})
	}
}

// TestNegativeHitsSharded: on a sharded descriptor (shards: 3, 10 of 30
// each, taken in turn) a negative hit goes back to the shard whose turn it
// is, as a hit would be taken there: after three hits (one per shard) it
// empties shard 0 again, whose figure, scaled by 3, is the whole limit
// (see TestNegativeHitsShardedExact for a shard that counted nothing).
func TestNegativeHitsSharded(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	const conf = `domain: d
descriptors:
  - key: sharded
    shards: 3
    rate_limit: {unit: minute, requests_per_unit: 30}
`
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			st := newStore(t, kind).(*redisstore.Store)
			e := startRLS(t, st, writeConf(t, conf), envOpts{shard: st.Shard, spread: st.Spread, shards: st.Shards})
			e.expect(t, "a hit on each shard", []string{"O:O", "O:O", "O:O"}, "d", desc("sharded", "s"))
			neg := desc("sharded", "s")
			neg.IsNegativeHits = true
			if r := e.call(t, "d", 0, neg); codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 30 {
				t.Fatalf("a negative hit on shard 0: %s, remaining %d; want O:O, 30 (shard 0 empty again, × 3)", codesOf(r), r.Statuses[0].LimitRemaining)
			}
			// Shards 1 and 2 still hold their hit: 9 left each, × 3.
			for i := 1; i <= 2; i++ {
				if got := e.remaining(t, "d", "sharded", "s"); got != 27 {
					t.Errorf("check on shard %d: %d left, want 27 (its hit kept)", i, got)
				}
			}
		})
	}
}

// TestNegativeHitsShardedExact: on a sharded descriptor (shards: 3, 10 of
// 30 each) negative hits give back as many hits as the shards together
// count, whichever shards counted them: one hit taken on one shard, then
// given back while it is another's turn (that shard counted nothing, and
// gave nothing back: one hit stayed counted); three taken at once on one
// shard, then given back (over every shard, each its share: two stayed
// counted). After each, every shard is empty: 30 left on each (× 3).
func TestNegativeHitsShardedExact(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	const conf = `domain: d
descriptors:
  - key: sharded
    shards: 3
    rate_limit: {unit: minute, requests_per_unit: 30}
`
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			st := newStore(t, kind).(*redisstore.Store)
			e := startRLS(t, st, writeConf(t, conf), envOpts{shard: st.Shard, spread: st.Spread, shards: st.Shards})
			neg := func(hits uint64) {
				t.Helper()
				d := withHits(desc("sharded", "s"), hits)
				d.IsNegativeHits = true
				if r := e.call(t, "d", 0, d); codesOf(r) != "O:O" {
					t.Fatalf("%d negative hits: %s; want O:O", hits, codesOf(r))
				}
			}
			empty := func(after string) {
				t.Helper()
				for i := range 3 {
					if got := e.remaining(t, "d", "sharded", "s"); got != 30 {
						t.Errorf("after %s, check %d: %d left, want 30 (every shard empty)", after, i+1, got)
					}
				}
			}
			e.expect(t, "a hit", []string{"O:O"}, "d", withHits(desc("sharded", "s"), 1))
			neg(1)
			empty("a hit given back on the next shard's turn")
			e.expect(t, "three hits at once", []string{"O:O"}, "d", withHits(desc("sharded", "s"), 3))
			neg(3)
			empty("three hits given back")
		})
	}
}

// TestNegativeQuotaDescriptorNeverOver: a quota_mode descriptor with
// is_negative_hits answers OK, so while one applies, the request's quota
// descriptors are not all over and do not deny it, as a quota descriptor
// in shadow_mode (the reference's overall code follows the statuses).
func TestNegativeQuotaDescriptorNeverOver(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`), envOpts{})
	e.expect(t, "q to its limit", []string{"O:O", "X:X"}, "p", desc("q", "x"))
	neg := desc("q", "y")
	neg.IsNegativeHits = true
	e.expect(t, "q over beside a negative quota descriptor", []string{"O:XO"}, "p", desc("q", "x"), neg)
}
