package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// deadlines is a memstore that notes the deadline of every call's context.
type deadlines struct {
	*memstore.Store
	mu  sync.Mutex
	got []time.Time // the zero time for a call without one
}

func (d *deadlines) note(ctx context.Context) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.got = append(d.got, dl)
	d.mu.Unlock()
}

func (d *deadlines) TakeAll(ctx context.Context, rs []sluice.Request, out []sluice.Decision) error {
	d.note(ctx)
	return d.Store.TakeAll(ctx, rs, out)
}

func (d *deadlines) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d.note(ctx)
	return d.Store.Take(ctx, r)
}

func (d *deadlines) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d.note(ctx)
	return d.Store.Refund(ctx, r)
}

// TestNegativeStoreCallsShareDeadline: with Options.StoreTimeout, the
// store calls of an Envoy request with refunds made in turn share one
// deadline: after the first of each key's refunds (bounded by the store
// itself, so that a store that does not answer fails it as a store
// failure), the calls after it, of a sharded key (its shards asked, then
// each given back its part) and of one key refunded twice, and the take
// after them, so that a store that does not answer holds the request
// about one timeout, not one per call made in turn.
func TestNegativeStoreCallsShareDeadline(t *testing.T) {
	s, err := descriptors.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: sh\n    shards: 2\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: u\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(memstore.Options{})
	st := &deadlines{Store: ms}
	shard, shards := shardsOf(sluice.PerMinute(5))
	e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{}, Metrics: metrics.New(prometheus.NewRegistry()),
		Now: func() time.Time { return t0 }, Shard: shard, Shards: shards, StoreTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sh := match(t, s, 2, [2]string{"sh", "x"})[0]
	for _, p := range shards(sluice.Request{Key: sh.Key, Algorithm: sh.Rule.Algorithm, Now: t0}, 2) {
		p.Cost = 2
		if d, err := ms.Take(ctx, p); err != nil || !d.Allowed {
			t.Fatalf("charging %s: %+v, %v", p.Key, d, err)
		}
	}
	ds := match(t, s, 2, [2]string{"sh", "x"}, [2]string{"u", "a"}, [2]string{"u", "a"}, [2]string{"sh", "x"}, [2]string{"u", "b"})
	for i := range 4 {
		ds[i].Negative = true
	}
	out := make([]engine.DescriptorStatus, len(ds))
	if res := e.DecideDescriptors(ctx, ds, out); res.OverLimit || res.StoreErr != nil {
		t.Fatalf("4 refunds and a take: %+v; want OK", res)
	}
	// The sharded key: its shards asked, shard 0 given back; its shards
	// asked again, shard 1 given back. u:a given back twice. The take.
	if len(st.got) != 7 {
		t.Fatalf("%d store calls, want 7", len(st.got))
	}
	var shared []time.Time
	for _, dl := range st.got {
		if !dl.IsZero() {
			shared = append(shared, dl)
		}
	}
	if len(shared) != 5 {
		t.Errorf("%d store calls with a deadline of the request's, want 5 (all but the first of each key's refunds): %v", len(shared), st.got)
	}
	for i, dl := range shared {
		if !dl.Equal(shared[0]) {
			t.Errorf("store call %d made in turn: deadline %v, want the one shared by all (%v)", i+1, dl, shared[0])
		}
	}
}
