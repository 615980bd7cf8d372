package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestClusterKeysCannotChooseSlot: sixty keys "same}N" — with a bare
// hash tag all would hash as "same" and land on one node — spread over the
// three nodes of a real Cluster, and each keeps its own count.
func TestClusterKeysCannotChooseSlot(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
	ctx := context.Background()
	l := sluice.PerMinute(1)
	for i := range 60 {
		k := "same}" + strconv.Itoa(i)
		d, err := s.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0})
		if err != nil || !d.Allowed {
			t.Fatalf("Take(%q) = %+v, %v; want allowed (its own count)", k, d, err)
		}
	}
	var counts []int
	total := 0
	for _, addr := range c.Addrs {
		n, err := redistest.Do(addr, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(n)
		counts = append(counts, v)
		total += v
	}
	t.Logf("keys per node: %v", counts)
	if total != 60 {
		t.Fatalf("%d keys in the Cluster, want 60", total)
	}
	for i, n := range counts {
		// 60 keys over three nodes by CRC16: each node gets some and none
		// gets all. (The fixed key names make this deterministic.)
		if n == 0 || n == 60 {
			t.Errorf("node %d holds %d of 60 keys; want the keys spread over the nodes: %v", i, n, counts)
		}
	}
	// Every Redis key's tag is the whole escaped limiter key: the slot
	// Redis computes is that of the escaped key, never of "same".
	same, _ := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", "same")
	distinct := map[string]bool{}
	for i := range 60 {
		sl, err := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", s.Key("same}"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		distinct[sl] = true
	}
	if len(distinct) < 50 || (len(distinct) == 1 && distinct[same]) {
		t.Errorf("60 keys same}N hash to %d distinct slots (the slot of \"same\" is %s); want them spread", len(distinct), same)
	}
}

func TestKeyEscapesHashTag(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: "t:"})
	for _, tc := range []struct{ k, want string }{
		{"user:42", "t:{user:42}"},
		{"a}b", `t:{a\)b}`},
		{`a\b`, `t:{a\\b}`},
		{`a\)b`, `t:{a\\)b}`},
		{"{x}", `t:{{x\)}`},
		{"", "t:{}"},
	} {
		if got := s.Key(tc.k); got != tc.want {
			t.Errorf("Key(%q) = %q, want %q", tc.k, got, tc.want)
		}
	}
	// Distinct keys, distinct Redis keys, whatever they contain.
	seen := map[string]string{}
	for _, k := range []string{"a}b", `a\)b`, `a\\)b`, `a\b`, "a)b", `a\}b`, `a}\b`, "}", `\)`, `\`, `\\`} {
		rk := s.Key(k)
		if prev, dup := seen[rk]; dup {
			t.Errorf("Key(%q) = Key(%q) = %q", k, prev, rk)
		}
		seen[rk] = k
	}
}
