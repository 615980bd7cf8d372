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

// TestClusterRefundAfterCheck: between a cross-slot TakeAll's take of 60
// from a and its refund, another client checks a (cost 0) or is refused
// on it, on a real 3-node Cluster, with a full bucket before the take or
// 30 taken, 10 ms or 50 ms after it (before and after the take's mark, the
// tick the debt before it refills by). Either moves the token bucket's
// last refill (T), past mark in the later case, and the refund then gives
// back the take less the refill from mark to T; that refill was made in
// the bucket by the check too (it refills to T), so what is left is the
// debt the bucket would have without the take: the key must be left as
// the reference that never saw the TakeAll leaves it, for every algorithm
// (the refusal: for the buckets and GCRA, whose burst of 100 refuses 95).
func TestClusterRefundAfterCheck(t *testing.T) {
	serialHooks(t) // it sets testHookAfterCheck and testHookAfterTake
	c := redistest.StartCluster(t)
	s := openStore(t, Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	l := sluice.PerSecond(1000).WithBurst(100)
	t0 := sluicetest.T0
	type trace struct {
		between string        // "check" or "refused"
		prior   int64         // taken at t0 before the TakeAll (seen by both)
		after   time.Duration // from t0 to the request between
	}
	var traces []trace
	for _, between := range []string{"check", "refused"} {
		for _, prior := range []int64{0, 30} {
			for _, after := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond} {
				traces = append(traces, trace{between, prior, after})
			}
		}
	}
	for ti, tr := range traces {
		t1 := t0.Add(tr.after)
		for _, alg := range sluice.Algorithms() {
			if tr.between == "refused" && alg != sluice.TokenBucket && alg != sluice.GCRA && alg != sluice.LeakyBucket {
				continue // a window of 1000 a second admits it
			}
			l := windowShare(alg, l)
			a, b := fmt.Sprintf("refund-between/%d/a/%v", ti, alg), ""
			for i := 0; b == "" || slot(s.Key(a)) == slot(s.Key(b)); i++ {
				b = fmt.Sprintf("refund-between/%d/b%d/%v", ti, i, alg)
			}
			req := func(key string, cost int64, at time.Time) sluice.Request {
				return sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: cost, Now: at}
			}
			ref := sluicetest.NewReference()
			if tr.prior > 0 {
				ref.Take(ctx, req(a, tr.prior, t0))
				if d, err := s.Take(ctx, req(a, tr.prior, t0)); err != nil || !d.Allowed {
					t.Fatalf("%v %+v: the prior take = %+v, %v", alg, tr, d, err)
				}
			}
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
				if tr.between == "check" {
					r := req(a, 0, t1)
					ref.Take(ctx, r)
					if _, err := s.Take(ctx, r); err != nil {
						t.Fatal(err)
					}
					return
				}
				// Refused while the take holds a's 60 (at most 60 of
				// the 100 free): the reference, which never saw the
				// take, is not asked (a refused request counts nothing).
				if d, err := s.Take(ctx, req(a, 95, t1)); err != nil || d.Allowed {
					t.Fatalf("%v %+v: the other take of 95 = %+v, %v; want refused", alg, tr, d, err)
				}
			}
			refunds := s.Refunds()
			ds := make([]sluice.Decision, 2)
			err := s.TakeAll(ctx, []sluice.Request{req(a, 60, t0), req(b, 1, t0)}, ds)
			testHookAfterCheck, testHookAfterTake = nil, nil
			if err != nil || sluice.AllAllowed(ds) || s.Refunds() != refunds+1 {
				t.Fatalf("%v %+v: TakeAll = %+v, %v, refunds %d → %d; want b refused and a refunded", alg, tr, ds, err, refunds, s.Refunds())
			}
			for _, probe := range []sluice.Request{req(a, 0, t1), req(a, 100, t1), req(a, 1, t1), req(a, 5, t1.Add(5*time.Millisecond))} {
				want, _ := ref.Take(ctx, probe)
				got, err := s.Take(ctx, probe)
				if err != nil || got != want {
					t.Errorf("%v %+v: after the refund, Take(cost %d at t0+%v) = %+v, %v; the reference that never saw the TakeAll: %+v",
						alg, tr, probe.Cost, probe.Now.Sub(t0), got, err, want)
				}
			}
		}
	}
}
