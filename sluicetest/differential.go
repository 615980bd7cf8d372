package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// trace is one random request.
type traceStep struct {
	at    time.Duration
	key   int
	cost  int64
	force bool // a report (Request.Force)
}

// randomTrace returns n requests over keys keys with non-decreasing times:
// runs at one instant, microsecond and millisecond gaps, and gaps of several
// periods, so that buckets fill, windows roll and keys come to rest.
func randomTrace(rng *rand.Rand, n, keys int, l sluice.Limit) []traceStep {
	var at time.Duration
	capacity := max(l.Rate, l.BurstOrRate())
	out := make([]traceStep, n)
	for i := range out {
		switch r := rng.IntN(100); {
		case r < 35: // same instant
		case r < 55:
			at += time.Duration(rng.IntN(1000)) * time.Microsecond
		case r < 90:
			at += time.Duration(rng.Int64N(int64(l.Period)/max(1, l.Rate)*3)/int64(time.Microsecond)+1) * time.Microsecond
		default:
			at += time.Duration(rng.Int64N(3*int64(l.Period))/int64(time.Microsecond)) * time.Microsecond
		}
		cost := int64(1)
		switch r := rng.IntN(100); {
		case r < 5:
			cost = 0
		case r < 15:
			cost = rng.Int64N(capacity + 3)
		}
		force := rng.IntN(100) < 6
		if force && rng.IntN(2) == 0 {
			cost = rng.Int64N(4*capacity + 3)
		}
		out[i] = traceStep{at: at, key: rng.IntN(keys), cost: cost, force: force}
	}
	return out
}

// DifferentialLimits are the limits the randomized tests use: whole and
// fractional spacings, bursts above and below the rate, segments, and a
// limit that needs coarser ticks.
func DifferentialLimits() []sluice.Limit {
	return []sluice.Limit{
		sluice.PerMinute(10),
		sluice.PerSecond(3),
		sluice.Every(5, 250*time.Millisecond).WithBurst(2),
		sluice.PerSecond(7).WithBurst(12),
		sluice.PerHour(100),
		sluice.PerDay(1_000_000),
		sluice.PerMinute(10).WithSegments(4),
		sluice.Every(6, 1200*time.Millisecond).WithSegments(3),
	}
}

// testDifferential replays random traces through s and Reference and
// requires identical decisions.
func testDifferential(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	sd := seed(t)
	for _, alg := range sluice.Algorithms() {
		for li, l := range DifferentialLimits() {
			if skipLimit(alg, l) {
				continue
			}
			rng := rand.New(rand.NewPCG(sd, uint64(li)*16+uint64(alg)))
			ref := NewReference()
			prefix := uniq(t, fmt.Sprintf("%s/%d/", alg, li))
			for i, st := range randomTrace(rng, 300, 3, l) {
				r := sluice.Request{Key: fmt.Sprintf("%s%d", prefix, st.key), Algorithm: alg, Limit: l, Cost: st.cost, Now: T0.Add(st.at), Force: st.force}
				want, err := ref.Take(ctx, r)
				if err != nil {
					t.Fatalf("reference: %v", err)
				}
				got, err := s.Take(ctx, r)
				if err != nil {
					t.Fatalf("%s %v step %d: Take: %v", alg, l, i, err)
				}
				if got != want {
					t.Fatalf("%s %v step %d (seed %d): Take(key %d, t0+%v, cost %d, force %v) = %+v, want %+v", alg, l, i, sd, st.key, st.at, st.cost, st.force, got, want)
				}
			}
		}
	}
}

// testGCRAEqualsTokenBucket: the same trace decides the same under both.
func testGCRAEqualsTokenBucket(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	sd := seed(t)
	for li, l := range DifferentialLimits() {
		if l.Segments > 1 {
			continue
		}
		rng := rand.New(rand.NewPCG(sd, uint64(li)))
		prefix := uniq(t, fmt.Sprint(li))
		for i, st := range randomTrace(rng, 400, 2, l) {
			key := fmt.Sprintf("%s/%d", prefix, st.key)
			now := T0.Add(st.at)
			tb, err1 := s.Take(ctx, sluice.Request{Key: key + "/tb", Algorithm: sluice.TokenBucket, Limit: l, Cost: st.cost, Now: now})
			g, err2 := s.Take(ctx, sluice.Request{Key: key + "/gcra", Algorithm: sluice.GCRA, Limit: l, Cost: st.cost, Now: now})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if tb != g {
				t.Fatalf("%v step %d (seed %d) at t0+%v cost %d: token_bucket %+v, gcra %+v", l, i, sd, st.at, st.cost, tb, g)
			}
		}
	}
}

// isWindow reports whether alg is a window, which takes no burst.
func isWindow(alg sluice.Algorithm) bool {
	return alg == sluice.FixedWindow || alg == sluice.SlidingWindowLog || alg == sluice.SlidingWindowCounter
}

// skipLimit reports whether alg refuses l, so that the randomized tests
// skip the pair: segments are the sliding window counter's, and a burst
// other than the rate the buckets' and GCRA's.
func skipLimit(alg sluice.Algorithm, l sluice.Limit) bool {
	return l.Segments > 1 && alg != sluice.SlidingWindowCounter || isWindow(alg) && l.Burst != 0 && l.Burst != l.Rate
}
