package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// diffLimits are the limits of the Go-vs-Lua differential tests: integer and
// non-integer Period/Rate, Burst above and below Rate, Segments 1 and more,
// microsecond periods, and limits that need coarser ticks.
var diffLimits = []sluice.Limit{
	sluice.PerSecond(5),
	sluice.PerSecond(3),                       // 333333.3 µs per request
	sluice.Every(7, 10*time.Millisecond),      // 1428.57 µs
	sluice.PerSecond(10).WithBurst(2),         // burst < rate
	sluice.Every(3, time.Second).WithBurst(8), // burst > rate
	sluice.Every(2, 3*time.Microsecond),       // tiny period
	sluice.PerMinute(10).WithSegments(4),
	sluice.Every(9, 1200*time.Millisecond).WithSegments(3).WithBurst(4),
	sluice.PerHour(100).WithSegments(60),
	sluice.PerDay(1_000_000),                               // ticks of 10 µs
	sluice.Every(5_000_000, 30*24*time.Hour).WithBurst(20), // coarser still
}

// diffCosts returns costs 0..Burst+2 for small limits; for large ones, small
// costs plus the edges (Burst, Burst+1, Burst+2, Rate, Rate+1).
func diffCost(rng *rand.Rand, l sluice.Limit) int64 {
	b := l.BurstOrRate()
	if b <= 20 && l.Rate <= 20 {
		if rng.IntN(2) == 0 {
			return 1
		}
		return rng.Int64N(b + 3)
	}
	edges := []int64{0, 1, 1, 1, 2, 3, b, b + 1, b + 2, l.Rate, l.Rate + 1}
	return edges[rng.IntN(len(edges))]
}

// diffForce makes one request in 12 a report (Request.Force), with costs
// past the capacity, and now and then one so large that the debt's cap
// (sluice.Algorithm.Charge) decides.
func diffForce(rng *rand.Rand, l sluice.Limit, r *sluice.Request) {
	if rng.IntN(12) != 0 {
		return
	}
	r.Force = true
	switch rng.IntN(4) {
	case 0:
		r.Cost = rng.Int64N(5*max(l.Rate, l.BurstOrRate()) + 3)
	case 1:
		r.Cost = 1 << (40 + rng.IntN(23))
	}
}

// diffStep advances the clock: often not at all or by a few µs, sometimes
// by up to two periods, rarely backwards (the algorithms clamp that).
func diffStep(rng *rand.Rand, l sluice.Limit) time.Duration {
	per := max(int64(l.Period)/l.Rate, int64(time.Microsecond))
	switch x := rng.IntN(20); {
	case x < 4:
		return 0
	case x < 8:
		return time.Duration(rng.Int64N(50)+1) * time.Microsecond
	case x < 16:
		return time.Duration(rng.Int64N(3*per)/1000+1) * time.Microsecond
	case x < 19:
		return time.Duration(rng.Int64N(2*int64(l.Period))/1000+1) * time.Microsecond
	default:
		return -time.Duration(rng.Int64N(int64(l.Period)/2)/1000) * time.Microsecond
	}
}

// testDifferential drives every algorithm and limit through a long random
// trace of takes and refunds on s and on sluicetest.Reference, and
// requires equal decisions.
func testDifferential(t *testing.T, s *redisstore.Store, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(sluicetest.Seed(t), 1))
	for _, alg := range sluice.Algorithms() {
		for li, l := range diffLimits {
			if alg.ValidateLimit(l) != nil {
				// Over sluice.MaxLogRate, or a window's burst other than
				// its rate: both refuse it, counting nothing.
				r := sluice.Request{Key: "diff/over", Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}
				_, werr := sluicetest.NewReference().Take(ctx, r)
				if _, err := s.Take(ctx, r); !errors.Is(err, sluice.ErrInvalidLimit) || !errors.Is(werr, sluice.ErrInvalidLimit) {
					t.Fatalf("%v %v: Take error %v, reference %v; want ErrInvalidLimit", alg, l, err, werr)
				}
				continue
			}
			ref := sluicetest.NewReference()
			keys := []string{fmt.Sprintf("diff/%d/%v/%d/a", time.Now().UnixNano(), alg, li), fmt.Sprintf("diff/%d/%v/%d/b{x}", time.Now().UnixNano(), alg, li)}
			now := sluicetest.T0.Add(time.Duration(rng.Int64N(int64(time.Hour))) / time.Microsecond * time.Microsecond)
			for i := range steps {
				now = now.Add(diffStep(rng, l))
				r := sluice.Request{Key: keys[rng.IntN(len(keys))], Algorithm: alg, Limit: l, Cost: diffCost(rng, l), Now: now}
				diffForce(rng, l, &r)
				call, do, ask := "Take", s.Take, ref.Take
				if rng.IntN(6) == 0 {
					// A refund (sluice.Algorithm.Refund's twin), now and
					// then of more than any key holds.
					call, do, ask = "Refund", s.Refund, ref.Refund
					if rng.IntN(8) == 0 {
						r.Cost = 1 << (40 + rng.IntN(23))
					}
				}
				want, werr := ask(ctx, r)
				got, err := do(ctx, r)
				if err != nil || werr != nil {
					t.Fatalf("%v %v step %d: %s(%+v): err %v, reference err %v", alg, l, i, call, r, err, werr)
				}
				if got != want {
					t.Fatalf("%v %v (burst %d, segments %d) step %d: %s(cost %d at %d µs, force %v) = %+v, reference %+v", alg, l, l.Burst, l.Segments, i, call, r.Cost, r.Now.UnixMicro(), r.Force, got, want)
				}
			}
		}
	}
}

// testDifferentialTakeAll does the same for TakeAll over mixed algorithms,
// limits and keys (sometimes the same key twice in one call).
func testDifferentialTakeAll(t *testing.T, s sluice.Store, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(sluicetest.Seed(t), 2))
	ref := sluicetest.NewReference()
	type rule struct {
		alg sluice.Algorithm
		l   sluice.Limit
		key string
	}
	var rules []rule
	base := time.Now().UnixNano()
	for i, alg := range sluice.Algorithms() {
		for j, l := range []sluice.Limit{sluice.PerSecond(4), sluice.Every(3, 700*time.Millisecond).WithBurst(5), sluice.PerMinute(6).WithSegments(3)} {
			if !alg.TakesBurst() {
				l.Burst = 0 // a window takes no burst
			}
			rules = append(rules, rule{alg, l, fmt.Sprintf("all/%d/%d/%d", base, i, j)})
		}
	}
	now := sluicetest.T0
	for i := range steps {
		now = now.Add(diffStep(rng, sluice.PerSecond(4)))
		n := 1 + rng.IntN(4)
		rs := make([]sluice.Request, n)
		for j := range rs {
			ru := rules[rng.IntN(len(rules))]
			rs[j] = sluice.Request{Key: ru.key, Algorithm: ru.alg, Limit: ru.l, Cost: rng.Int64N(3), Now: now}
			diffForce(rng, ru.l, &rs[j])
		}
		got, want := make([]sluice.Decision, n), make([]sluice.Decision, n)
		if err := ref.TakeAll(ctx, rs, want); err != nil {
			t.Fatalf("step %d: reference TakeAll: %v", i, err)
		}
		if err := s.TakeAll(ctx, rs, got); err != nil {
			t.Fatalf("step %d: TakeAll: %v", i, err)
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("step %d: TakeAll(%+v)[%d] = %+v, reference %+v", i, rs, j, got[j], want[j])
			}
		}
	}
}

func TestDifferentialSingleNode(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	t.Run("Take", func(t *testing.T) { testDifferential(t, s, 600) })
	t.Run("TakeAll", func(t *testing.T) { testDifferentialTakeAll(t, s, 2000) })
}

func TestDifferentialCluster(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	t.Run("Take", func(t *testing.T) { testDifferential(t, s, 150) })
	t.Run("TakeAll", func(t *testing.T) { testDifferentialTakeAll(t, s, 2000) })
}
