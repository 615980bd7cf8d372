package redisstore

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// What a resharding does to the counts of sharded keys: a shard key the
// new slot map still names keeps its count, even when its slot moved to
// another master (Redis moves the key with its slot) or it is now another
// shard's name; a name the new map brings starts empty. So a key spent
// before the resharding admits afterwards exactly the shares of its new
// names (the limit here divides by the shard counts: every share is
// alike): at most one extra limit, once, and nothing for a key whose
// names all stayed.
func TestShardCountsAcrossResharding(t *testing.T) {
	serialHooks(t) // it sets slotRefresh
	was := slotRefresh
	slotRefresh = 100 * time.Millisecond
	t.Cleanup(func() { slotRefresh = was })
	c := redistest.StartCluster(t)
	open := func() *Store {
		return openStore(t, Options{Addrs: c.Addrs, Cluster: true})
	}
	ctx := context.Background()
	before := open()
	l := sluice.PerHour(60)
	now := time.Now()
	take := func(s *Store, k string, n int) (admitted int64) {
		for range 2 * l.Rate {
			r := sluice.Request{Key: k, Algorithm: sluice.TokenBucket, Limit: l, Cost: 1, Now: now}
			if m := s.Shard(&r, n); m != n {
				t.Fatalf("Shard(%q, %d) used %d shards", k, n, m)
			}
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		return admitted
	}
	type key struct {
		k     string
		n     int
		names []string
		nodes []uint16 // the master of each shard, by the first map
	}
	var keys []key
	m0 := before.slotNodes.Load()
	for _, n := range []int{3, 6} {
		for i := range 40 {
			k := "rule|fp|" + strconv.Itoa(n) + "/192.0.2." + strconv.Itoa(i)
			kk := key{k: k, n: n, names: before.ShardKeys(k, n)}
			for _, sk := range kk.names {
				kk.nodes = append(kk.nodes, m0.of[slot(before.Key(sk))])
			}
			if got := take(before, k, n); got != l.Rate {
				t.Fatalf("%s over %d shards, %d takes: %d admitted, want %d", k, n, 2*l.Rate, got, l.Rate)
			}
			keys = append(keys, kk)
		}
	}
	myID := func(a string) string {
		v, err := redistest.Do(a, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(v)
	}
	out, err := exec.Command("redis-cli", "--cluster", "reshard", c.Addrs[0], "--cluster-from", myID(c.Addrs[0]),
		"--cluster-to", myID(c.Addrs[1]), "--cluster-slots", "3000", "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out[max(0, len(out)-1000):])
	}
	after := open()
	m1 := after.slotNodes.Load()
	if *m1 == *m0 {
		t.Fatal("the slot map read after the resharding is the one before")
	}
	deadline := time.Now().Add(10 * time.Second) // a bound: before reads the map again within 100 ms
	for before.slotNodes.Load() == m0 || *before.slotNodes.Load() != *m1 {
		if time.Now().After(deadline) {
			t.Fatal("the store opened before the resharding still has the old slot map 10 s on")
		}
		time.Sleep(10 * time.Millisecond) // a poll, not a synchronisation
	}
	renamedKeys, renamedShards, keptMoved := map[int]int{}, 0, 0
	for _, kk := range keys {
		now := after.ShardKeys(kk.k, kk.n)
		var want int64
		for i, sk := range now {
			j := slices.Index(kk.names, sk)
			switch {
			case j < 0:
				want += ShardLimit(sluice.TokenBucket, l, kk.n, i).Rate
				renamedShards++
			case m1.of[slot(after.Key(sk))] != kk.nodes[j]:
				keptMoved++
			}
		}
		if want > 0 {
			renamedKeys[kk.n]++
		}
		if got := take(after, kk.k, kk.n); got != want {
			t.Errorf("%s over %d shards, spent before the resharding, renamed %q to %q: %d admitted after, want %d (its renamed shards' shares)",
				kk.k, kk.n, kk.names, now, got, want)
		}
	}
	t.Logf("3000 slots of 16384 moved: %d of 40 keys over 3 shards and %d of 40 over 6 got new shard names (%d names of %d); %d shards kept their name and count on another master",
		renamedKeys[3], renamedKeys[6], renamedShards, 40*3+40*6, keptMoved)
	if keptMoved == 0 {
		t.Fatal("no shard kept its name while its slot moved: the test checked no migrated count")
	}
}
