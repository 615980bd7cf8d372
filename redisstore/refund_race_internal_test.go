package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRefundAfterAnotherTake: a cross-slot TakeAll takes a key's share,
// another client takes from the key 10ms later, then the TakeAll refunds
// its share (another slot denied). A bucket full at the take refilled 10
// tokens between the two requests; without the take that refill was lost
// (a full bucket holds no more), so a refund of all 100 erased 10 of the
// other request: the next request of 100 was admitted where the reference,
// which never saw the refunded one, refuses it. The refund must leave the
// key as there. (GCRA and the leaky bucket still give back too much here:
// their state keeps no time of the last request, see refund.lua.)
func TestRefundAfterAnotherTake(t *testing.T) {
	srv := redistest.StartServer(t)
	s, err := New(context.Background(), Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.PerSecond(1000).WithBurst(100)
	t0 := sluicetest.T0
	t1 := t0.Add(10 * time.Millisecond) // 10 tokens refilled
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.SlidingWindowLog} {
		key := "refund-race/" + alg.String()
		ours := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 100, Now: t0}
		qs := make([]request, 1)
		if err := s.prepare(&ours, &qs[0]); err != nil {
			t.Fatal(err)
		}
		rps, err := s.run(ctx, "take", qs, []int{0}, nil)
		if err != nil || !rps[0].allowed {
			t.Fatalf("%v: take of 100 = %+v, %v; want allowed", alg, rps, err)
		}
		ref := sluicetest.NewReference()
		other := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 10, Now: t1}
		want, _ := ref.Take(ctx, other)
		got, err := s.Take(ctx, other)
		if err != nil || got.Allowed != want.Allowed {
			t.Fatalf("%v: the other take = %+v, %v; reference %+v", alg, got, err, want)
		}
		if _, err := s.run(ctx, "refund", qs, []int{0}, rps); err != nil {
			t.Fatal(err)
		}
		probe := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 100, Now: t1}
		want, _ = ref.Take(ctx, probe)
		if got, err = s.Take(ctx, probe); err != nil || got != want {
			t.Errorf("%v: after the refund, Take(cost 100) = %+v, %v; the reference that never saw the refunded take: %+v", alg, got, err, want)
		}
	}
}
