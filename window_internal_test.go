package sluice

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestExpiredIsBinarySearch: expired, the sliding log's scan-then-search,
// finds exactly the first time after cut, for every log of up to 12 times
// (with repeats) and every cut around them.
func TestExpiredIsBinarySearch(t *testing.T) {
	for n := 0; n <= 12; n++ {
		log := make([]int64, n)
		for rep := 1; rep <= 3; rep++ { // times repeat rep at a time
			for i := range log {
				log[i] = int64(10 + 2*(i/rep))
			}
			for cut := int64(8); cut <= 36; cut++ {
				want := sort.Search(n, func(i int) bool { return log[i] > cut })
				if got := expired(log, cut); got != want {
					t.Fatalf("expired(%v, %d) = %d, want %d", log, cut, got, want)
				}
			}
		}
	}
}

// TestSlidingCounter1IsSlidingCounterN: the one-segment counter written
// out decides, and leaves the state, exactly as the general one, over
// every small state, instant and cost (forced or not), for a few limits,
// and over random large ones.
func TestSlidingCounter1IsSlidingCounterN(t *testing.T) {
	check := func(p params, st State, now, cost int64, force bool) {
		t.Helper()
		a, b := st, st
		var oa, ob outcome
		slidingCounter1(&a, &p, now, cost, force, &oa)
		slidingCounterN(&b, &p, now, cost, force, &ob)
		if a.T != b.T || a.N != b.N || a.M != b.M || oa != ob {
			t.Fatalf("%+v state %+v now %d cost %d force %v: one segment %+v %+v, general %+v %+v", p, st, now, cost, force, a, oa, b, ob)
		}
	}
	for _, lim := range []Limit{Every(1, 10*time.Microsecond), Every(3, 7*time.Microsecond), Every(5, 12*time.Microsecond), Every(4, 4*time.Microsecond).WithBurst(9)} {
		var p params
		if err := lim.paramsTo(&p); err != nil {
			t.Fatal(err)
		}
		for T := int64(0); T <= 4; T++ {
			for n := int64(0); n <= p.rate+2; n++ {
				for m := int64(0); m <= p.rate+2; m++ {
					for now := int64(0); now <= 5*p.period; now++ {
						for cost := int64(0); cost <= p.rate+2; cost++ {
							check(p, State{T: T, N: n, M: m}, now, cost, false)
							check(p, State{T: T, N: n, M: m}, now, cost, true)
						}
					}
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		lim := Every(1+rng.Int64N(5000), time.Duration(1+rng.Int64N(3_600_000_000))*time.Microsecond)
		var p params
		if err := lim.paramsTo(&p); err != nil {
			continue
		}
		now := rng.Int64N(1 << 52)
		k := now / p.period
		st := State{T: max(0, k+rng.Int64N(5)-2), N: rng.Int64N(p.rate + 2), M: rng.Int64N(p.rate + 2)}
		cost := rng.Int64N(p.rate + 3)
		if rng.IntN(10) == 0 {
			cost = rng.Int64N(1 << 40)
		}
		check(p, st, now, cost, rng.IntN(4) == 0)
	}
}
