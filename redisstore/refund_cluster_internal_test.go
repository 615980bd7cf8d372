package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestClusterRefundAfterAnotherTake is the case that made GCRA's and the
// leaky bucket's cross-slot refunds give back too much, on a real 3-node
// Cluster, through TakeAll itself. TakeAll(a cost 100, b cost 1) at t0
// passes its check; then another client fills b, so b's take refuses and
// a's, which counted, is refunded; between a's take and the refund another
// client takes 10 from a, 10 ms later. The bucket was full at t0 (the
// queue empty): without the TakeAll it would have refilled nothing and
// admitted the 10 at once, while with it 10 tokens refilled (10 slots
// leaked) before them. A refund of all 100 then gave those 10 back as
// well: the next request of 100 was admitted at t1 where the reference,
// which never saw the refunded TakeAll, refuses it. Every later decision
// must equal the reference's.
func TestClusterRefundAfterAnotherTake(t *testing.T) {
	serialHooks(t) // it sets testHookAfterCheck and testHookAfterTake
	c := redistest.StartCluster(t)
	s := openStore(t, Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	l := sluice.PerSecond(1000).WithBurst(100)
	t0 := sluicetest.T0
	t1 := t0.Add(10 * time.Millisecond)
	for _, alg := range sluice.Algorithms() {
		l := windowShare(alg, l)
		a, b := "refund-cluster/a/"+alg.String(), ""
		for i := 0; b == "" || slot(s.Key(a)) == slot(s.Key(b)); i++ {
			b = fmt.Sprintf("refund-cluster/b%d/%v", i, alg)
		}
		req := func(key string, cost int64, at time.Time) sluice.Request {
			return sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: cost, Now: at}
		}
		ref := sluicetest.NewReference()
		var other sluice.Decision
		testHookAfterCheck = func() {
			room, err := s.Take(ctx, req(b, 0, t0))
			if err != nil {
				t.Fatal(err)
			}
			if d, err := s.Take(ctx, req(b, room.Remaining, t0)); err != nil || !d.Allowed {
				t.Fatalf("%v: filling b: %+v, %v", alg, d, err)
			}
		}
		testHookAfterTake = func() {
			r := req(a, 10, t1)
			want, _ := ref.Take(ctx, r)
			got, err := s.Take(ctx, r)
			if err != nil || got.Allowed != want.Allowed {
				t.Fatalf("%v: the other take = %+v, %v; reference %+v", alg, got, err, want)
			}
			other = got
		}
		refunds := s.Refunds()
		ds := make([]sluice.Decision, 2)
		err := s.TakeAll(ctx, []sluice.Request{req(a, 100, t0), req(b, 1, t0)}, ds)
		testHookAfterCheck, testHookAfterTake = nil, nil
		if err != nil || sluice.AllAllowed(ds) || s.Refunds() != refunds+1 {
			t.Fatalf("%v: TakeAll = %+v, %v, refunds %d → %d; want b refused and a refunded", alg, ds, err, refunds, s.Refunds())
		}
		for _, probe := range []sluice.Request{req(a, 100, t1), req(a, 91, t1), req(a, 1, t1.Add(5*time.Millisecond))} {
			want, _ := ref.Take(ctx, probe)
			got, err := s.Take(ctx, probe)
			if err != nil || got != want {
				t.Errorf("%v: after the refund (the other take: %+v), Take(cost %d at t0+%v) = %+v, %v; the reference that never saw the TakeAll: %+v",
					alg, other, probe.Cost, probe.Now.Sub(t0), got, err, want)
			}
		}
	}
}
