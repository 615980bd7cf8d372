package redisstore_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A TakeAll across Cluster slots of reports alone (Request.Force: each
// charged whatever a check would say) is taken at once, one call per
// slot: the check that comes first across slots can refuse none of them.
// A report over a key's 3 shards on 3 nodes took two calls on each node
// (checked, then taken), now one; each shard is charged its part, past
// its share too. With a request that is not a report among them, the
// check stays: two calls on each node.
func TestTakeAllReportsAcrossSlotsTakenAtOnce(t *testing.T) {
	t.Parallel() // a Cluster of its own
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	l := sluice.PerHour(30)
	spread := func(key string, cost int64, force bool) []sluice.Request {
		return s.Spread(sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: l, Cost: cost, Force: force, Now: sluicetest.T0}, 3)
	}
	// takeAll has s take rs, each node running want calls (-1: any).
	takeAll := func(step string, rs []sluice.Request, want int64) []sluice.Decision {
		t.Helper()
		ds := make([]sluice.Decision, len(rs))
		before, _ := nodeStats(t, c)
		if err := s.TakeAll(ctx, rs, ds); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		after, _ := nodeStats(t, c)
		for i := range after {
			if n := after[i] - before[i]; want >= 0 && n != want {
				t.Errorf("%s: node %d ran %d calls, want %d (of each node: %v -> %v)", step, i, n, want, before, after)
			}
		}
		return ds
	}
	takeAll("scripts loaded", spread("takeall/warm", 3, true), -1)
	ds := takeAll("report of 45 over 3 shards of 10", spread("takeall/report", 45, true), 1)
	for i, d := range ds {
		if d.Remaining != 0 {
			t.Errorf("part %d: %+v, want Remaining 0 (charged 15 of 10)", i, d)
		}
	}
	for i, q := range spread("takeall/report", 0, false) {
		d, err := s.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 0 {
			t.Errorf("shard %d after the report: %+v, want Remaining 0 (charged past its share)", i, d)
		}
	}
	mixed := append(spread("takeall/mixed", 3, true), spread("takeall/other", 3, false)...)
	takeAll("reports and requests", mixed, 2*2)
}
