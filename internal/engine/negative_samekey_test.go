package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// peekBarrier is a memstore whose first peek (a TakeAll of cost 0: a
// sharded refund asking its shards what they have used), once read, waits for a
// second peek, or for a minute of the bubble's clock: refunds made at
// once peek one after the other before either gives back; refunds made
// in turn pass the wait when nothing else runs.
type peekBarrier struct {
	*memstore.Store
	mu     sync.Mutex
	peeks  int
	second chan struct{}
}

func (p *peekBarrier) TakeAll(ctx context.Context, rs []sluice.Request, out []sluice.Decision) error {
	peek := true
	for _, r := range rs {
		peek = peek && r.Cost == 0
	}
	err := p.Store.TakeAll(ctx, rs, out)
	if peek {
		p.mu.Lock()
		p.peeks++
		n := p.peeks
		p.mu.Unlock()
		switch n {
		case 1:
			select {
			case <-p.second:
			case <-time.After(time.Minute):
			}
		case 2:
			close(p.second)
		}
	}
	return err
}

// shardsOf returns engine.Options' Shard and Shards for keys split into
// shards of limit each, named KEY#i; Shard always gives shard 0's turn.
func shardsOf(limit sluice.Limit) (shard func(*sluice.Request, int) int, shards func(sluice.Request, int) []sluice.Request) {
	shard = func(r *sluice.Request, n int) int {
		r.Key, r.Limit = r.Key+"#0", limit
		return n
	}
	shards = func(r sluice.Request, n int) []sluice.Request {
		out := make([]sluice.Request, n)
		for i := range out {
			out[i] = r
			out[i].Key, out[i].Limit = r.Key+"#"+string(rune('0'+i)), limit
		}
		return out
	}
	return shard, shards
}

// TestNegativeSameShardedKeyGivesBackAll: two negative descriptors of the
// same sharded key in one call (2 hits each; each of its 2 shards counts
// 2) give back all 4 hits, as two calls one after the other do: the second
// refund asks the shards after the first gave back, and finds the hits
// left on the other shard. Made at once, both would ask first, both give
// back to the shard whose turn it is, and 2 hits would stay counted.
func TestNegativeSameShardedKeyGivesBackAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := descriptors.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: sh\n    shards: 2\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"))
		if err != nil {
			t.Fatal(err)
		}
		ms := memstore.New(memstore.Options{})
		st := &peekBarrier{Store: ms, second: make(chan struct{})}
		half := sluice.PerMinute(5)
		shard, shards := shardsOf(half)
		e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{}, Metrics: metrics.New(prometheus.NewRegistry()),
			Now: func() time.Time { return t0 }, Shard: shard, Shards: shards})
		if err != nil {
			t.Fatal(err)
		}
		ds := match(t, s, 2, [2]string{"sh", "x"}, [2]string{"sh", "x"})
		ctx := context.Background()
		parts := shards(sluice.Request{Key: ds[0].Key, Algorithm: ds[0].Rule.Algorithm, Now: t0}, 2)
		for _, p := range parts {
			p.Cost = 2
			if d, err := ms.Take(ctx, p); err != nil || !d.Allowed {
				t.Fatalf("charging %s: %+v, %v", p.Key, d, err)
			}
		}
		for i := range ds {
			ds[i].Negative = true
		}
		out := make([]engine.DescriptorStatus, len(ds))
		res := e.DecideDescriptors(ctx, ds, out)
		if res.OverLimit || res.StoreErr != nil {
			t.Fatalf("two refunds of one sharded key: %+v; want OK", res)
		}
		for _, p := range parts {
			d, err := ms.Take(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Algorithm.Capacity(half); d.Remaining != want {
				t.Errorf("shard %s after 4 hits given back: %d left, want %d (every hit given back)", p.Key, d.Remaining, want)
			}
		}
	})
}
