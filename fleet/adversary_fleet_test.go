package fleet_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// adversaryKeys are key values a client may send (a header, a query
// parameter, a cookie) chosen to steer a Redis Cluster: hash tags of their
// own, braces the wrong way round, an empty tag, the escape character, a
// shard's spelling, a key long enough to be hashed.
var adversaryKeys = []string{
	"{x}", "}{", "{}", "{", "}", `\`, `\)`, "a}b{c", "{x}y", "k#1", "shard|k#0",
	strings.Repeat("{a}", 100), strings.Repeat("}", 300),
}

// TestAdversaryCannotSkipTheCount: on a real 3-node Cluster, two instances
// deciding in Redis exactly, through a Lease (auto and fixed chunks), one
// through a Sync (batches after every decision), and each through the
// over-limit cache in front of it too, are sent keys chosen to steer
// Cluster slots and costs at the bounds (0, the capacity, past it,
// MaxInt64, reports of 0 and of MaxInt64). A request the store cannot
// decide would pass uncounted under store.on_error: allow; none fails (no
// batch either), at one instant the instances together never admit more
// than the limit's capacity, in Take or in a TakeAll of every key across
// slots, and nothing is admitted after a report of MaxInt64.
func TestAdversaryCannotSkipTheCount(t *testing.T) {
	t.Parallel() // a Cluster and stores of its own
	cl := redistest.StartCluster(t)
	o := redisstore.Options{Addrs: cl.Addrs, Cluster: true, PublishRefunds: true}
	ra, rb := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	stacks := map[string][2]sluice.Store{
		"exact": {ra, rb},
		"lease-auto": {
			newLease(t, ra, fleet.LeaseOptions{}),
			newLease(t, rb, fleet.LeaseOptions{}),
		},
		"lease-4": {
			newLease(t, ra, fleet.LeaseOptions{Chunk: 4}),
			newLease(t, rb, fleet.LeaseOptions{Chunk: 4}),
		},
	}
	// One instance: several may pass the limit between batches by design
	// (README: soft limits); one decides exactly. Batches by hand, after
	// every decision (below).
	sa := newSync(t, ra, fleet.SyncOptions{Interval: time.Hour})
	stacks["sync"] = [2]sluice.Store{sa, sa}
	for _, name := range []string{"exact", "lease-auto", "lease-4", "sync"} {
		st := stacks[name]
		cached := [2]sluice.Store{
			fleet.NewOverLimitCache(st[0], fleet.OverLimitOptions{}),
			fleet.NewOverLimitCache(st[1], fleet.OverLimitOptions{}),
		}
		for _, pair := range []struct {
			name string
			st   [2]sluice.Store
		}{{name, st}, {name + "+cache", cached}} {
			var syncs [2]*fleet.Sync
			if name == "sync" {
				syncs = [2]*fleet.Sync{sa}
			}
			t.Run(pair.name, func(t *testing.T) {
				probeAdversary(t, pair.name, pair.st, syncs)
			})
		}
	}
}

func probeAdversary(t *testing.T, ns string, st [2]sluice.Store, syncs [2]*fleet.Sync) {
	ctx := context.Background()
	flush := func(what string) {
		for i, s := range syncs {
			if s == nil {
				continue
			}
			if err := s.Flush(); err != nil {
				t.Fatalf("%s: instance %d's batch: %v; a batch that fails leaves its views to go stale, and every decision then fails", what, i, err)
			}
		}
	}
	l := sluice.PerHour(10)
	for _, alg := range sluice.Algorithms() {
		c := alg.Capacity(l)
		steps := []struct {
			cost  int64
			force bool
		}{
			{0, false}, {1, false}, {0, false}, {3, false}, {c + 1, false},
			{math.MaxInt64, false}, {0, true}, {2, false}, {0, false}, {c, false},
			{1, false}, {1, false}, {1, false}, {1, false}, {1, false},
			{1, false}, {1, false}, {1, false}, {0, false}, {1, false},
			{math.MaxInt64, true}, {1, false}, {0, false}, {1, false}, {math.MaxInt64, true}, {1, false},
		}
		for _, k := range adversaryKeys {
			admitted := int64(0)
			debt := false // a report of MaxInt64 came: nothing of cost 1 fits again at this instant
			for i, s := range steps {
				r := sluice.Request{Namespace: ns + "|" + alg.String() + "|", Key: k, Algorithm: alg, Limit: l, Cost: s.cost, Force: s.force, Now: sluicetest.T0}
				d, err := st[i%2].Take(ctx, r)
				if err != nil {
					t.Fatalf("%v key %q step %d (cost %d, force %v): %v; a store error lets the request pass uncounted", alg, k, i, s.cost, s.force, err)
				}
				if d.Allowed && !s.force {
					admitted += s.cost
					if debt && s.cost > 0 {
						t.Errorf("%v key %q step %d: cost %d admitted after a report of MaxInt64", alg, k, i, s.cost)
					}
				}
				debt = debt || s.force && s.cost == math.MaxInt64
				flush(fmt.Sprintf("%v key %q step %d", alg, k, i))
			}
			if admitted > c || admitted < min(c, 1) {
				t.Errorf("%v key %q: %d admitted at one instant, want between 1 and the capacity %d", alg, k, admitted, c)
			}
		}
		// All the keys in one TakeAll, across slots: none fails, and each
		// is counted once per call until it is full.
		rs := make([]sluice.Request, len(adversaryKeys))
		for i, k := range adversaryKeys {
			rs[i] = sluice.Request{Namespace: ns + "|all|" + alg.String() + "|", Key: k, Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}
		}
		ds := make([]sluice.Decision, len(rs))
		calls := 0
		for i := range c + 2 {
			if err := st[i%2].TakeAll(ctx, rs, ds); err != nil {
				t.Fatalf("%v TakeAll %d of the keys: %v", alg, i, err)
			}
			if sluice.AllAllowed(ds) {
				calls++
			}
			flush(fmt.Sprintf("%v TakeAll %d", alg, i))
		}
		if calls != int(c) {
			t.Errorf("%v: TakeAll of %d keys admitted %d times, want the capacity %d", alg, len(rs), calls, c)
		}
	}
}
