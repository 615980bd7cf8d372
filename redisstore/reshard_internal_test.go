package redisstore

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// After a resharding of the Cluster, a store opened before it and one
// opened after place a key's shards alike (each reads the slot map again
// now and then), so that a fleet whose instances started on either side of
// the resharding counts each key on one set of shards. The older store
// used to keep its first map until it restarted: 64 keys in 100 got other
// shard keys than on the newer one, and a key taken alternately from the
// two was admitted 40 times under a limit of 30.
func TestShardsAgreeAfterResharding(t *testing.T) {
	serialHooks(t) // it sets slotRefresh
	was := slotRefresh
	slotRefresh = 100 * time.Millisecond
	t.Cleanup(func() { slotRefresh = was }) // after the stores' Close (cleanups run last first)
	c := redistest.StartCluster(t)
	open := func() *Store {
		return openStore(t, Options{Addrs: c.Addrs, Cluster: true})
	}
	before := open()
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
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "rule|fp|203.0.113." + strconv.Itoa(i)
	}
	differ := func() (n int, first string) {
		for _, k := range keys {
			if strings.Join(before.ShardKeys(k, 3), ",") != strings.Join(after.ShardKeys(k, 3), ",") {
				if n == 0 {
					first = k
				}
				n++
			}
		}
		return n, first
	}
	deadline := time.Now().Add(10 * time.Second) // a bound: the old store reads the map again within 100 ms
	for n, k := differ(); n > 0; n, k = differ() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d keys placed differently by stores opened before and after a resharding, 10 s on; %s: %q and %q",
				n, len(keys), k, before.ShardKeys(k, 3), after.ShardKeys(k, 3))
		}
		time.Sleep(10 * time.Millisecond) // a poll, not a synchronisation
	}
	// Together they hold a sharded key to its limit.
	l := sluice.Limit{Rate: 30, Period: time.Hour}
	admitted := 0
	now := time.Now()
	for i := range 200 {
		s := []*Store{before, after}[i%2]
		r := sluice.Request{Key: keys[0], Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: now}
		s.Shard(&r, 3)
		d, err := s.Take(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted > 30 {
		t.Errorf("a key sharded over 3, taken 200 times from both stores: %d admitted, limit 30", admitted)
	}
}
