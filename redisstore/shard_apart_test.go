package redisstore_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A shard of a key and a key spelled as that shard's logical key ("k#3")
// count apart. With shards: auto only hot keys are sharded, so a cold key
// whose value a client chose to end in "#3" was counted in the very Redis
// key of the hot key's shard 3, under the whole limit instead of the
// shard's share: here it filled all three shards of "tenant" (nothing
// admitted), and the hot key's traffic filled its counter for it.
func TestShardKeysApartFromPlainKeys(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			var s *redisstore.Store
			if kind == "redis" {
				s = open(t, redisstore.Options{Addrs: []string{redistest.StartServer(t).Addr}})
			} else {
				s = open(t, redisstore.Options{Addrs: redistest.StartCluster(t).Addrs, Cluster: true})
			}
			testShardKeysApart(t, s)
		})
	}
}

func testShardKeysApart(t *testing.T, s *redisstore.Store) {
	ctx := context.Background()
	l := sluice.PerHour(30)
	const n = 3
	for _, alg := range sluice.Algorithms() {
		key := "rule|fp|tenant-" + alg.String()
		lim := l
		if alg == sluice.LeakyBucket {
			lim = l.WithBurst(29) // a queue of 30 at an instant
		}
		plain := func(k string) sluice.Request {
			return sluice.Request{Key: k, Algorithm: alg, Limit: lim, Cost: 1, Now: sluicetest.T0}
		}
		// The plain keys spelled as the shards: each spends its whole limit.
		for _, sk := range s.ShardKeys(key, n) {
			for i := range 30 {
				if d, err := s.Take(ctx, plain(sk)); err != nil || !d.Allowed {
					t.Fatalf("%s: plain key %q, request %d of its limit of 30: %+v, %v", alg, sk, i+1, d, err)
				}
			}
		}
		// The sharded key still has its own limit of 30.
		admitted := 0
		for range 60 {
			r := plain(key)
			if m := s.Shard(&r, n); m != n {
				t.Fatalf("%s: Shard used %d shards, want %d", alg, m, n)
			}
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 30 {
			t.Errorf("%s: sharded key %q admitted %d of 60 after plain keys %q spent their limits, want its own 30", alg, key, admitted, s.ShardKeys(key, n))
		}
	}
}
