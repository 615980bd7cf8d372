package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// owner returns the index of the Cluster node that holds Redis key k.
func owner(t testing.TB, c *redistest.Cluster, k string) int {
	t.Helper()
	for i, a := range c.Addrs {
		if _, err := redistest.Do(a, "EXISTS", k); err == nil {
			return i
		}
	}
	t.Fatalf("no node owns %q", k)
	return -1
}

// The shards of a key are on different slots and, with 3 masters and 3
// shards, on 3 different nodes; the choice is the same in every Store.
func TestShardPlacement(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s1 := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	s2 := open(t, redisstore.Options{Addrs: c.Addrs[1:], Cluster: true})
	if s1.Masters() != 3 {
		t.Fatalf("Masters() = %d, want 3", s1.Masters())
	}
	for i := range 50 {
		k := "rule|fp|203.0.113." + strconv.Itoa(i)
		keys := s1.ShardKeys(k, 3)
		if got := s2.ShardKeys(k, 3); strings.Join(got, ",") != strings.Join(keys, ",") {
			t.Fatalf("ShardKeys(%q) differ between stores: %q and %q", k, keys, got)
		}
		nodes := map[int]bool{}
		for _, sk := range keys {
			nodes[owner(t, c, s1.Key(sk))] = true
		}
		if len(nodes) != 3 {
			t.Fatalf("ShardKeys(%q, 3) = %q on %d nodes, want 3", k, keys, len(nodes))
		}
	}
	// A shard's key depends only on the key and its place: the shards of
	// a smaller count are the first of a larger one (a reload changing
	// the count keeps the shards both have).
	for n := 2; n <= 8; n++ {
		small, large := s1.ShardKeys("grow", n-1), s1.ShardKeys("grow", n)
		if strings.Join(small, ",") != strings.Join(large[:n-1], ",") {
			t.Fatalf("ShardKeys(grow, %d) = %q does not start with ShardKeys(grow, %d) = %q", n, large, n-1, small)
		}
	}
	// More shards than nodes: distinct slots, every node used.
	keys := s1.ShardKeys("many", 7)
	slots, nodes := map[string]bool{}, map[int]bool{}
	for _, sk := range keys {
		sl, err := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", s1.Key(sk))
		if err != nil {
			t.Fatal(err)
		}
		slots[sl] = true
		nodes[owner(t, c, s1.Key(sk))] = true
	}
	if len(slots) != 7 || len(nodes) != 3 {
		t.Fatalf("ShardKeys(many, 7) = %q: %d slots, %d nodes; want 7 and 3", keys, len(slots), len(nodes))
	}
}

func TestShardLimit(t *testing.T) {
	for _, tc := range []struct {
		a     sluice.Algorithm
		l     sluice.Limit
		n     int
		rates []int64
		burst []int64
	}{
		{sluice.TokenBucket, sluice.PerMinute(10), 3, []int64{4, 3, 3}, []int64{4, 3, 3}},
		{sluice.TokenBucket, sluice.PerMinute(9).WithBurst(20), 3, []int64{3, 3, 3}, []int64{7, 7, 6}},
		{sluice.FixedWindow, sluice.PerMinute(10), 3, []int64{4, 3, 3}, []int64{4, 3, 3}}, // a window's burst is its rate
		// The leaky bucket's capacity, burst+1 = 10, is what is split.
		{sluice.LeakyBucket, sluice.PerMinute(9), 3, []int64{3, 3, 3}, []int64{3, 2, 2}},
	} {
		for i := range tc.n {
			got := redisstore.ShardLimit(tc.a, tc.l, tc.n, i)
			if got.Rate != tc.rates[i] || got.Burst != tc.burst[i] || got.Period != tc.l.Period {
				t.Errorf("ShardLimit(%v, %v, %d, %d) = %+v, want rate %d burst %d", tc.a, tc.l, tc.n, i, got, tc.rates[i], tc.burst[i])
			}
		}
	}
	// Shard caps the count by the limit.
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	r := sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(2), Cost: 1}
	if n := s.Shard(&r, 5); n != 2 || r.Limit.Rate != 1 {
		t.Errorf("Shard(2/m, 5) = %d shards, limit %+v; want 2 shards of 1", n, r.Limit)
	}
	r = sluice.Request{Key: "k", Algorithm: sluice.LeakyBucket, Limit: sluice.PerMinute(10).WithBurst(3), Cost: 1}
	if n := s.Shard(&r, 5); n != 2 || r.Limit.Burst != 1 {
		t.Errorf("Shard(leaky 10/m burst 3, 5) = %d shards, limit %+v; want 2 shards of burst 1", n, r.Limit)
	}
}

// Keys sharded in rotation (a request matching three sharded rules shards
// three keys in turn) each spread over all their shards: every key admits
// its whole limit in an overload, not a third of it.
func TestShardPerKeyRotation(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	admitted := map[string]int{}
	for range 300 {
		for _, k := range []string{"rot/a", "rot/b", "rot/c"} {
			r := sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(90), Cost: 1, Now: sluicetest.T0}
			s.Shard(&r, 3)
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted[k]++
			}
		}
	}
	for k, n := range admitted {
		if n != 90 {
			t.Errorf("%s admitted %d of 300, want its whole limit of 90", k, n)
		}
	}
}

// Accuracy: two instances share one key sharded 3 ways on a Cluster, at
// one instant (nothing refills). Far over the limit they admit exactly the
// limit; just under it, at least min(sent, rate) − (n−1)·instances.
func TestShardAccuracy(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	stores := []*redisstore.Store{
		open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true}),
		open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true}),
	}
	ctx := context.Background()
	const limit, n = 300, 3
	base := fmt.Sprintf("acc/%d", time.Now().UnixNano())
	run := func(t *testing.T, alg sluice.Algorithm, key string, perStore int) int64 {
		l := sluice.PerHour(limit)
		if alg == sluice.LeakyBucket { // capacity Burst+1 at an instant
			l = l.WithBurst(limit - 1)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for si, s := range stores {
			wg.Go(func() {
				for range perStore - si {
					r := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}
					m := s.Shard(&r, n)
					d, err := s.Take(ctx, r)
					if err != nil {
						t.Error(err)
						return
					}
					redisstore.Unshard(&d, l, m)
					if d.Limit != limit {
						t.Errorf("Unshard: Limit = %d, want %d", d.Limit, limit)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return admitted.Load()
	}
	for _, alg := range sluice.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			// 1000 sent (500 + 500) ≫ 300.
			if got := run(t, alg, base+"/over/"+alg.String(), 500); got != limit {
				t.Errorf("far over the limit: admitted %d, want exactly %d", got, limit)
			}
			// 299 sent (150 + 149).
			got := run(t, alg, base+"/under/"+alg.String(), 150)
			t.Logf("%s: 299 sent just under the limit of 300 over 3 shards by 2 instances: %d admitted", alg, got)
			if lo := int64(299 - (n-1)*len(stores)); got < lo || got > 299 {
				t.Errorf("just under the limit: admitted %d of 299, want %d..299", got, lo)
			}
		})
	}
}

// nodeStats reads each node's EVALSHA calls and CPU seconds (user+sys).
func nodeStats(t testing.TB, c *redistest.Cluster) (calls []int64, cpu []float64) {
	t.Helper()
	for _, a := range c.Addrs {
		info, err := redistest.Do(a, "INFO", "all")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		var sec float64
		for line := range strings.SplitSeq(info, "\n") {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				n, _ = strconv.ParseInt(v, 10, 64)
			}
			for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if rest, ok := strings.CutPrefix(line, f); ok {
					v, _ := strconv.ParseFloat(rest, 64)
					sec += v
				}
			}
		}
		calls = append(calls, n)
		cpu = append(cpu, sec)
	}
	return calls, cpu
}

// busiest returns the largest delta's share of the total.
func busiest[T int64 | float64](before, after []T) float64 {
	var sum, top T
	for i := range before {
		d := after[i] - before[i]
		sum += d
		top = max(top, d)
	}
	if sum == 0 {
		return 0
	}
	return float64(top) / float64(sum)
}

// One hot key, 3000 decisions: unsharded, one node runs them all; sharded
// 3 ways, no node runs more than half.
func TestShardSpread(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	for _, shards := range []int{1, 3} {
		before, _ := nodeStats(t, c)
		for i := range 3000 {
			r := sluice.Request{Key: "spread/hot", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1_000_000), Cost: 1, Now: sluicetest.T0.Add(time.Duration(i) * time.Millisecond)}
			s.Shard(&r, shards)
			if _, err := s.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		after, _ := nodeStats(t, c)
		share := busiest(before, after)
		t.Logf("shards %d: EVALSHA per node %v -> %v, busiest share %.2f", shards, before, after, share)
		switch {
		case shards == 1 && share < 0.99:
			t.Errorf("unsharded: busiest node ran %.0f%% of the decisions, want all", share*100)
		case shards == 3 && share > 0.5:
			t.Errorf("3 shards: busiest node ran %.0f%% of the decisions, want at most 50%%", share*100)
		}
	}
}

// BenchmarkShardHotKey: one hot key on a 3-node Cluster, decisions from
// parallel goroutines, unsharded and with 3 shards: decisions/s, and the
// busiest node's share of the Cluster's CPU time and of its EVALSHA calls.
func BenchmarkShardHotKey(b *testing.B) {
	c := redistest.StartCluster(b)
	s := open(b, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	for _, shards := range []int{1, 3} {
		b.Run("shards="+strconv.Itoa(shards), func(b *testing.B) {
			key := fmt.Sprintf("bench/hot/%d/%d", shards, time.Now().UnixNano())
			calls0, cpu0 := nodeStats(b, c)
			start := time.Now()
			var n atomic.Int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					r := sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1_000_000), Cost: 1, Now: start.Add(time.Duration(i) * time.Microsecond)}
					s.Shard(&r, shards)
					if _, err := s.Take(context.Background(), r); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.StopTimer()
			el := time.Since(start)
			calls1, cpu1 := nodeStats(b, c)
			b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
			b.ReportMetric(busiest(cpu0, cpu1)*100, "%busiest-cpu")
			b.ReportMetric(busiest(calls0, calls1)*100, "%busiest-calls")
		})
	}
}

// Keys beyond the Store's cache of shard keys (1,024 cells) still spread
// over all their shards. A rule with shards: 3 on per-client keys with
// thousands of clients sent every request of a key that had fallen out of
// the cache to its shard 1: each key admitted a third of its limit.
func TestShardManyKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	const keys, rounds, n = 4096, 60, 3
	perIndex := make([]int, n)
	used := make([]map[string]bool, keys)
	for i := range used {
		used[i] = map[string]bool{}
	}
	for range rounds {
		for i := range keys {
			r := sluice.Request{Key: "many/" + strconv.Itoa(i), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(30), Cost: 1}
			if m := s.Shard(&r, n); m != n {
				t.Fatalf("Shard = %d, want %d", m, n)
			}
			_, tag, _ := strings.Cut(r.Key, "#")
			idx, err := strconv.Atoi(tag)
			if err != nil || idx >= n {
				t.Fatalf("shard key %q: want many/I#0..%d", r.Key, n-1)
			}
			perIndex[idx]++
			used[i][r.Key] = true
		}
	}
	for i, u := range used {
		if len(u) != n {
			t.Fatalf("key many/%d: %d requests went to %d shards %v, want all %d", i, rounds, len(u), u, n)
		}
	}
	total := keys * rounds
	for idx, c := range perIndex {
		if share := float64(c) / float64(total); share < 0.3 || share > 0.367 {
			t.Errorf("shard %d got %.1f%% of the requests, want about a third", idx, share*100)
		}
	}
}

// A cost that fits the larger shares of a limit not divisible by the
// shard count (10 over 3 shards: 4, 3, 3) goes to a shard that can hold
// it: it is refused as "wait", never as Never (sluice.ErrNeverAllowed
// tells a client to give up) on the shards of 3 while shard 0 admits it.
func TestShardCostAboveShare(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		l := sluice.PerMinute(10)
		if alg == sluice.LeakyBucket {
			l = l.WithBurst(10) // a queue of 11: shards of 4, 4 and 3
		}
		cost := int64(4)
		allowed := 0
		for i := range 6 {
			r := sluice.Request{Key: "cost/" + alg.String(), Algorithm: alg, Limit: l, Cost: cost, Now: sluicetest.T0}
			n := s.Shard(&r, 3)
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			redisstore.Unshard(&d, l, n)
			if d.RetryAfter == sluice.Never {
				t.Errorf("%s: request %d of cost %d on %s (limit %+v): Never, want admitted or a wait", alg, i, cost, r.Key, r.Limit)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed == 0 {
			t.Errorf("%s: no request of cost %d admitted, want at least one", alg, cost)
		}
	}
}

// Spread splits a charge over every shard: the parts add up to the cost,
// each on its shard's key with its shard's share of the limit; parts of 0
// are left out.
func TestSpread(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	l := sluice.PerHour(10)
	for _, tc := range []struct {
		cost  int64
		parts []int64
	}{{10, []int64{4, 3, 3}}, {2, []int64{1, 1}}, {180, []int64{60, 60, 60}}} {
		r := sluice.Request{Key: "spread", Algorithm: sluice.TokenBucket, Limit: l, Cost: tc.cost, Force: true}
		ps := s.Spread(r, 3)
		keys := s.ShardKeys("spread", 3)
		if len(ps) != len(tc.parts) {
			t.Fatalf("Spread(cost %d) = %d parts, want %d", tc.cost, len(ps), len(tc.parts))
		}
		for i, p := range ps {
			if p.Cost != tc.parts[i] || p.Key != keys[i] || p.Limit != redisstore.ShardLimit(r.Algorithm, l, 3, i) || !p.Force {
				t.Errorf("Spread(cost %d) part %d = %+v, want cost %d on %s with limit %+v", tc.cost, i, p, tc.parts[i], keys[i], redisstore.ShardLimit(r.Algorithm, l, 3, i))
			}
		}
	}
	if ps := s.Spread(sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(1), Cost: 5}, 3); len(ps) != 1 || ps[0].Key != "k" {
		t.Errorf("Spread of a limit of 1 (no shards) = %+v, want the request alone", ps)
	}
}
