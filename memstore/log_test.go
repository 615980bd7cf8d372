package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSlidingLogMovesInPlace: a sliding log that keeps moving back to the
// start of its array decides exactly as the algorithm on a State of its
// own, through growth, steady traffic, bursts, forced charges, idle gaps
// and rest, on Take and on TakeAll.
func TestSlidingLogMovesInPlace(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.Options{Shards: 1})
	rng := rand.New(rand.NewPCG(sluicetest.Seed(t), 7))
	lim := sluice.Every(50, 10*time.Millisecond)
	var ref sluice.State
	now := sluicetest.T0
	for i := range 20000 {
		switch {
		case i%5000 == 4999:
			now = now.Add(time.Second) // past the window: the log empties
		case i%700 < 20:
			// a burst: no time passes
		default:
			now = now.Add(time.Duration(rng.IntN(400)) * time.Microsecond)
		}
		cost := int64(rng.IntN(3))
		force := rng.IntN(50) == 0
		if force {
			cost = int64(rng.IntN(80))
		}
		var want sluice.Decision
		var err error
		if force {
			want, _, err = sluice.SlidingWindowLog.Charge(&ref, lim, now, cost)
		} else {
			want, _, err = sluice.SlidingWindowLog.Take(&ref, lim, now, cost)
		}
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Namespace: "ns|", Key: "k", Algorithm: sluice.SlidingWindowLog, Limit: lim, Cost: cost, Now: now, Force: force}
		var got sluice.Decision
		if i%3 == 0 {
			ds := make([]sluice.Decision, 2)
			other := r
			other.Key, other.Cost, other.Force = "other", 0, false
			err = s.TakeAll(ctx, []sluice.Request{r, other}, ds)
			got = ds[0]
		} else {
			got, err = s.Take(ctx, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d (t0+%v, cost %d, force %v): %+v, want %+v", i, now.Sub(sluicetest.T0), cost, force, got, want)
		}
	}
}

// TestSlidingLogSteadyAllocatesNothing: a hot key's sliding log at a
// steady size allocates nothing per decision once it is full size.
func TestSlidingLogSteadyAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	ctx := context.Background()
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, sluice.Every(2000, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	decide := func() {
		i++
		if d, err := lim.AllowAt(ctx, "hot", sluicetest.T0.Add(time.Duration(i)*time.Microsecond), 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v, %v", i, d, err)
		}
	}
	for range 5000 { // the log reaches its steady 1,000 times
		decide()
	}
	// Counted over all the decisions, not per decision: append's growth
	// would allocate once every few hundred decisions, which AllocsPerRun
	// would round down to 0. One run of 20,000 (after one more as its
	// warm-up), under AllocsPerRun's GOMAXPROCS 1, so that goroutines
	// other tests left behind do not count in the process-wide figure.
	if n := testing.AllocsPerRun(1, func() {
		for range 20000 {
			decide()
		}
	}); n > 2 {
		t.Errorf("%v allocations in 20,000 decisions at a steady size, want none", n)
	}
}
