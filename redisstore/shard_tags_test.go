package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestShardClientHashTags: a sharded key whose value carries hash tags of
// its own ({x}, }{, {}, a shard's "#0" spelling) is still split over the
// three masters of a real Cluster, each of its shards decided without an
// error, and together they admit exactly the key's limit: a client cannot
// steer its key's shards onto one slot, nor make one fail.
func TestShardClientHashTags(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
	ctx := context.Background()
	const limit, n = 30, 3
	l := sluice.PerHour(limit)
	for _, v := range []string{"{x}", "}{", "{}", "{", "}", `\`, "a}b{c", "k#0", "{k}#1"} {
		k := "rule|fp|" + v
		nodes := map[int]bool{}
		for _, sk := range s.ShardKeys(k, n) {
			// The Redis key of a shard is the shard's logical key under
			// the shards' namespace, outside the hash tag.
			r := sluice.Request{Namespace: redisstore.ShardNamespace(""), Key: sk, Algorithm: sluice.FixedWindow, Limit: l, Now: sluicetest.T0}
			if _, err := s.Take(ctx, r); err != nil { // cost 0: makes the key
				t.Fatalf("key %q, shard %q: %v", k, sk, err)
			}
			nodes[owner(t, c, s.KeyOf(&r))] = true
		}
		if len(nodes) != n {
			t.Errorf("the %d shards of %q lie on %d nodes, want %d", n, k, len(nodes), n)
		}
		admitted := 0
		for range 3 * limit {
			r := sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0}
			m := s.Shard(&r, n)
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatalf("key %q sharded: %v", k, err)
			}
			redisstore.Unshard(&d, l, m)
			if d.Allowed {
				admitted++
			}
		}
		if admitted != limit {
			t.Errorf("key %q over %d shards: %d of %d admitted, want exactly %d", k, n, admitted, 3*limit, limit)
		}
	}
}
