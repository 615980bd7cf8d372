package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// key as there. (GCRA and the leaky bucket gave back too much here until
// their state kept the latest request's tick, see refund.lua.)
func TestRefundAfterAnotherTake(t *testing.T) {
	srv := redistest.StartServer(t)
	s := openStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerSecond(1000).WithBurst(100)
	t0 := sluicetest.T0
	t1 := t0.Add(10 * time.Millisecond) // 10 tokens refilled
	for _, alg := range sluice.Algorithms() {
		l := windowShare(alg, l)
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

// TestRefundNeverOver: a take, 1 to 3 requests of other clients at random
// later times, then the take's refund, over random traces of the buckets
// and GCRA. The key must then hold at least the debt (queue) of the
// reference that never saw the take: a ResetAfter never shorter. With one
// request in between it is the reference's, to a tick.
func TestRefundNeverOver(t *testing.T) {
	srv := redistest.StartServer(t)
	s := openStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	seed := sluicetest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	limits := []sluice.Limit{sluice.PerSecond(1000).WithBurst(100), sluice.Every(5, 700*time.Millisecond).WithBurst(3), sluice.PerSecond(3)}
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket} {
		for li, l := range limits {
			spacing := int64(l.Period) / l.Rate / 1000 // µs
			tk, _ := l.Ticks()
			compared := 0
			for trial := range 300 {
				key := fmt.Sprintf("never-over/%d/%v/%d/%d", seed, alg, li, trial)
				ref := sluicetest.NewReference()
				now := sluicetest.T0
				req := func(cost int64) sluice.Request {
					return sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: cost, Now: now}
				}
				step := func() { now = now.Add(time.Duration(rng.Int64N(3*spacing)+1) * time.Microsecond) }
				// A history both see.
				for range rng.IntN(4) {
					r := req(rng.Int64N(l.BurstOrRate()) + 1)
					ref.Take(ctx, r)
					if _, err := s.Take(ctx, r); err != nil {
						t.Fatal(err)
					}
					step()
				}
				ours := req(rng.Int64N(l.BurstOrRate()) + 1)
				qs := make([]request, 1)
				if err := s.prepare(&ours, &qs[0]); err != nil {
					t.Fatal(err)
				}
				rps, err := s.run(ctx, "take", qs, []int{0}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !rps[0].allowed {
					continue
				}
				others, same := rng.IntN(3)+1, true
				for range others {
					step()
					r := req(rng.Int64N(l.BurstOrRate()) + 1)
					want, _ := ref.Take(ctx, r)
					got, err := s.Take(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					same = same && got.Allowed == want.Allowed
				}
				if _, err := s.run(ctx, "refund", qs, []int{0}, rps); err != nil {
					t.Fatal(err)
				}
				if !same {
					// One was refused for the quota the take held (which
					// others may see until the refund): the reference
					// counted it, the store did not.
					continue
				}
				compared++
				probe := req(0)
				want, _ := ref.Take(ctx, probe)
				got, err := s.Take(ctx, probe)
				if err != nil {
					t.Fatal(err)
				}
				if got.ResetAfter < want.ResetAfter || got.Remaining > want.Remaining {
					t.Fatalf("%v %v trial %d (seed %d): after the refund with %d requests between, %+v; the reference that never saw the take: %+v (more left: refunded too much)", alg, l, trial, seed, others, got, want)
				}
				if others == 1 && (got.ResetAfter-want.ResetAfter > time.Duration(tk.Tick+1)*time.Microsecond || got.Remaining < want.Remaining-1) {
					t.Errorf("%v %v trial %d (seed %d): after the refund with one request between, %+v; the reference: %+v (want it, to a tick)", alg, l, trial, seed, got, want)
				}
			}
			if compared < 30 {
				t.Errorf("%v %v: %d trials compared, want 30 or more", alg, l, compared)
			}
		}
	}
}
