package redisstore_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// slotOwners reads the Cluster's slot ranges (CLUSTER NODES, from the
// Cluster itself, not from the store's map): slot → master address.
func slotOwners(t testing.TB, c *redistest.Cluster) map[int]string {
	t.Helper()
	out, err := redistest.Do(c.Addrs[0], "CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[int]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				t.Fatalf("CLUSTER NODES: slot range %q", r)
			}
			for sl := a; sl <= b; sl++ {
				owners[sl] = addr
			}
		}
	}
	if len(owners) != 16384 {
		t.Fatalf("CLUSTER NODES covers %d slots, want 16384", len(owners))
	}
	return owners
}

// shardsPerMaster counts the shards of key k over n on each master, by
// each shard's Redis key's CLUSTER KEYSLOT.
func shardsPerMaster(t testing.TB, c *redistest.Cluster, s *redisstore.Store, owners map[int]string, k string, n int) map[string]int {
	t.Helper()
	per := map[string]int{}
	slots := map[string]bool{}
	for _, sk := range s.ShardKeys(k, n) {
		rk := s.KeyOf(&sluice.Request{Namespace: redisstore.ShardNamespace(""), Key: sk})
		v, err := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", rk)
		if err != nil {
			t.Fatal(err)
		}
		if slots[v] {
			t.Fatalf("ShardKeys(%q, %d): two shards in slot %s", k, n, v)
		}
		slots[v] = true
		sl, _ := strconv.Atoi(v)
		per[owners[sl]]++
	}
	return per
}

// More shards than masters spread evenly: on the real 3-node Cluster the
// shards of a key differ per master by at most one (counted by CLUSTER
// KEYSLOT against the Cluster's own slot ranges). Only one shard per
// master was guaranteed: the shards past the third went to whatever free
// slot came first, so that, say, 6 shards could sit 4, 1 and 1 on the
// three masters and one master carried 4/6 of the key's decisions.
func TestShardsEvenOverMasters(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	owners := slotOwners(t, c)
	uneven, worst, worstKey := 0, "", ""
	for n := 2; n <= 9; n++ {
		for i := range 20 {
			k := "rule|fp|198.51.100." + strconv.Itoa(i)
			per := shardsPerMaster(t, c, s, owners, k, n)
			lo, hi := n, 0
			for _, a := range c.Addrs {
				lo, hi = min(lo, per[a]), max(hi, per[a])
			}
			if hi-lo > 1 {
				if uneven == 0 {
					worst, worstKey = fmt.Sprint(per), k+" over "+strconv.Itoa(n)
				}
				uneven++
			}
		}
	}
	if uneven > 0 {
		t.Errorf("%d of 160 (key, shard count) placements put more than one shard more on one master than on another; first: %s: %s", uneven, worstKey, worst)
	}
}
